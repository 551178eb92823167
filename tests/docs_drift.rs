//! The reference documentation checked against the code, so that neither drifts without this test
//! failing. Each list comes from the code itself, never from a list kept here:
//!
//! - docs/configuration.md names every configuration key as its full dotted path in backticks
//!   (`config::known_config_keys`, the parser's own walk; list items as `list[].key`), every
//!   feature gate the agent accepts or refuses, and every klog flag (`cli::klog::LogArgs`);
//! - docs/cli.md names every subcommand as `antrea-vm-agent <sub>`, every `get` resource as
//!   `antrea-vm-agent get <resource>` and every long flag as `--flag`, read from clap's model of
//!   the command line (`cli::args::Cli`);
//! - docs/metrics.md names every metric family the agent exports (`support/exported_metrics.rs`,
//!   the rule the dashboard and alert checks use);
//! - every relative link in README.md, CHANGELOG.md, docs/*.md, metrics/README.md,
//!   deploy/**/README.md and crates/**/README.md reaches a file that exists, and its `#anchor` a heading of that file
//!   (GitHub's slugs).
//!
//! Markdown is read with pulldown-cmark (`support/markdown.rs`): a name inside a fenced code block
//! does not count, an inline code span does. A failure lists everything missing at once.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

#[path = "support/exported_metrics.rs"]
mod exported_metrics;
#[path = "support/markdown.rs"]
mod markdown;

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use clap::{Args, CommandFactory};

use antrea_vm_agent::cli::args::Cli;
use antrea_vm_agent::cli::klog::LogArgs;
use antrea_vm_agent::config::{
    known_config_keys, REFUSED_FEATURE_GATES, SUPPORTED_FEATURES_ON_EXTERNAL_NODE,
};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A reference document, parsed; a failure naming it when it does not exist.
fn reference(rel: &str) -> markdown::Doc {
    match std::fs::read_to_string(repo().join(rel)) {
        Ok(text) => markdown::parse(&text),
        Err(e) => panic!("{rel} cannot be read ({e}): it is the reference this test checks the code against"),
    }
}

/// A code span as compared with the names: trimmed, list indexes (`[0]`, `[*]`) written `[]`, as
/// the parser declares the keys of a list item.
fn normalize(span: &str) -> String {
    antrea_vm_agent::config::any_list_item_path(span.trim())
}

fn spans(doc: &markdown::Doc) -> BTreeSet<String> {
    doc.code_spans.iter().map(|s| normalize(s)).collect()
}

/// Whether a code span mentions `--flag`: one of its words is the flag, alone, with its value
/// (`--flag=VALUE`) or with an optional one (`--flag[=BOOL]`).
fn mentions_flag(spans: &BTreeSet<String>, flag: &str) -> bool {
    spans.iter().any(|s| {
        s.split_whitespace().any(|word| {
            word.strip_prefix(flag)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['=', '[']))
        })
    })
}

/// Whether a code span starts with `command` as whole words (`antrea-vm-agent get` is in
/// `antrea-vm-agent get ovsflows -o json`, not in `antrea-vm-agent getter`).
fn mentions_command(spans: &BTreeSet<String>, command: &str) -> bool {
    spans.iter().any(|s| {
        s.strip_prefix(command)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(char::is_whitespace))
    })
}

/// One group of missing names, for the failure message.
struct Missing {
    doc: &'static str,
    what: String,
    names: Vec<String>,
}

fn fail_on(missing: &[Missing]) {
    let mut text = String::new();
    for m in missing.iter().filter(|m| !m.names.is_empty()) {
        text.push_str(&format!("{} lacks {} {}:\n", m.doc, m.names.len(), m.what));
        for n in &m.names {
            text.push_str(&format!("  {n}\n"));
        }
    }
    assert!(
        text.is_empty(),
        "the documentation does not cover the code:\n{text}"
    );
}

#[test]
fn configuration_md_names_every_key_feature_gate_and_log_flag() {
    const DOC: &str = "docs/configuration.md";
    let keys = known_config_keys();
    assert!(
        keys.len() > 30 && keys.iter().any(|k| k == "standalone.inputLimits.maxFileBytes"),
        "the parser's key list looks wrong: {keys:?}"
    );
    let spans = spans(&reference(DOC));

    let missing_keys: Vec<String> = keys
        .iter()
        .filter(|k| !spans.contains(*k))
        .map(|k| format!("`{k}`"))
        .collect();

    let gates: BTreeSet<&str> = SUPPORTED_FEATURES_ON_EXTERNAL_NODE
        .iter()
        .copied()
        .chain(REFUSED_FEATURE_GATES.iter().map(|(g, _)| *g))
        .collect();
    let missing_gates: Vec<String> = gates
        .iter()
        .filter(|g| !spans.contains(**g) && !spans.contains(&format!("featureGates.{g}")))
        .map(|g| format!("`{g}`"))
        .collect();

    let log_flags = LogArgs::augment_args(clap::Command::new("klog"));
    let missing_flags: Vec<String> = log_flags
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long())
        .map(|l| format!("--{l}"))
        .filter(|f| !mentions_flag(&spans, f))
        .map(|f| format!("`{f}`"))
        .collect();

    fail_on(&[
        Missing {
            doc: DOC,
            what: "configuration keys (each as its full dotted path in backticks; keys of a list \
                   item as `list[].key`)"
                .into(),
            names: missing_keys,
        },
        Missing {
            doc: DOC,
            what: "feature gates (`Name` or `featureGates.Name` in backticks)".into(),
            names: missing_gates,
        },
        Missing {
            doc: DOC,
            what: "klog command-line flags (`--flag`, `--flag=VALUE` or `--flag[=VALUE]` in backticks)"
                .into(),
            names: missing_flags,
        },
    ]);
}

#[test]
fn cli_md_names_every_subcommand_get_resource_and_flag() {
    const DOC: &str = "docs/cli.md";
    let cli = Cli::command();
    let spans = spans(&reference(DOC));

    // Every visible subcommand (at any depth) with its path, and every visible long flag.
    let mut commands: Vec<String> = Vec::new();
    let mut flags: BTreeSet<String> = BTreeSet::new();
    let mut resources: Vec<String> = Vec::new();
    let mut stack = vec![(cli.get_name().to_string(), &cli)];
    while let Some((path, cmd)) = stack.pop() {
        for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
            if let Some(long) = arg.get_long() {
                flags.insert(format!("--{long}"));
            }
        }
        if path == format!("{} get", cli.get_name()) {
            let resource = cmd
                .get_positionals()
                .find(|a| a.get_id() == "resource")
                .expect("get has a resource argument");
            resources.extend(
                resource
                    .get_possible_values()
                    .iter()
                    .filter(|v| !v.is_hide_set())
                    .map(|v| format!("{path} {}", v.get_name())),
            );
        }
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let sub_path = format!("{path} {}", sub.get_name());
            commands.push(sub_path.clone());
            stack.push((sub_path, sub));
        }
    }
    commands.sort();
    assert!(
        commands.iter().any(|c| c == "antrea-vm-agent get") && resources.len() > 3,
        "clap's model looks wrong: {commands:?} {resources:?}"
    );

    let missing = |names: Vec<String>, found: &dyn Fn(&str) -> bool| -> Vec<String> {
        names
            .into_iter()
            .filter(|n| !found(n))
            .map(|n| format!("`{n}`"))
            .collect()
    };
    fail_on(&[
        Missing {
            doc: DOC,
            what: "subcommands (`antrea-vm-agent <subcommand>` in backticks, alone or starting \
                   an example)"
                .into(),
            names: missing(commands, &|c| mentions_command(&spans, c)),
        },
        Missing {
            doc: DOC,
            what: "`get` resources (`antrea-vm-agent get <resource>` in backticks, alone or \
                   starting an example)"
                .into(),
            names: missing(resources, &|r| mentions_command(&spans, r)),
        },
        Missing {
            doc: DOC,
            what: "flags (`--flag`, `--flag=VALUE` or `--flag[=VALUE]` in backticks)".into(),
            names: missing(flags.into_iter().collect(), &|f| mentions_flag(&spans, f)),
        },
    ]);
}

#[test]
fn metrics_md_names_every_exported_metric_family() {
    const DOC: &str = "docs/metrics.md";
    let exported = exported_metrics::exported();
    let spans = spans(&reference(DOC));
    let names: Vec<String> = exported
        .metrics
        .iter()
        .filter(|m| {
            !spans.iter().any(|s| {
                s.strip_prefix(m.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('{'))
            })
        })
        .map(|m| format!("`{m}`"))
        .collect();
    fail_on(&[Missing {
        doc: DOC,
        what: "metric families (`name` or `name{labels}` in backticks)".into(),
        names,
    }]);
}

// ---------------------------------------------------------------------------------------------
// Links.

/// The Markdown files whose links are checked, relative to the repository.
fn linked_docs() -> Vec<String> {
    let mut files: Vec<String> = ["README.md", "CHANGELOG.md", "metrics/README.md"]
        .iter()
        .filter(|f| repo().join(f).is_file())
        .map(|f| f.to_string())
        .collect();
    if let Ok(entries) = std::fs::read_dir(repo().join("docs")) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".md") && e.path().is_file() {
                files.push(format!("docs/{name}"));
            }
        }
    }
    let mut dirs = vec![PathBuf::from("deploy"), PathBuf::from("crates")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(repo().join(&dir)) else {
            continue;
        };
        for e in entries.flatten() {
            let rel = dir.join(e.file_name());
            if e.path().is_dir() {
                dirs.push(rel);
            } else if e.file_name() == "README.md" {
                files.push(rel.display().to_string());
            }
        }
    }
    files.sort();
    files
}

/// `%20` and friends decoded (GitHub links to `my%20file.md` reach `my file.md`).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            if let Some(b) = s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `base/../x/./y` as `x/y`, relative to the repository; `None` when it leaves the repository.
fn lexical(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// What is wrong with one link of `file`, if anything.
fn check_link(
    file: &str,
    dest: &str,
    anchors_of: &mut dyn FnMut(&Path) -> BTreeSet<String>,
) -> Option<String> {
    // A URL (https:, mailto:, ...) is not this test's business.
    let scheme = dest.split_once(':').is_some_and(|(s, _)| {
        !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
    });
    if scheme || dest.starts_with("//") {
        return None;
    }
    let (path, anchor) = match dest.split_once('#') {
        Some((p, a)) => (p, Some(percent_decode(a))),
        None => (dest, None),
    };
    let path = percent_decode(path.split('?').next().unwrap_or(path));
    let target = if path.is_empty() {
        PathBuf::from(file)
    } else if let Some(from_root) = path.strip_prefix('/') {
        // GitHub resolves a leading `/` at the repository's root.
        PathBuf::from(from_root)
    } else {
        Path::new(file).parent().unwrap_or(Path::new("")).join(&path)
    };
    let Some(target) = lexical(&target) else {
        return Some("leaves the repository".into());
    };
    let on_disk = repo().join(&target);
    if !on_disk.exists() {
        return Some(format!("{} does not exist", target.display()));
    }
    let anchor = anchor.filter(|a| !a.is_empty())?;
    if on_disk.extension().is_none_or(|e| e != "md") {
        // Line anchors of source files (#L10) and the like: GitHub's viewer, not a heading.
        return None;
    }
    let anchors = anchors_of(&target);
    if anchors.contains(&anchor) {
        None
    } else {
        Some(format!(
            "{} has no heading with the anchor #{anchor} (its anchors: {})",
            target.display(),
            anchors.iter().cloned().collect::<Vec<_>>().join(", ")
        ))
    }
}

#[test]
fn every_relative_link_and_anchor_in_the_docs_resolves() {
    let files = linked_docs();
    assert!(files.iter().any(|f| f == "README.md"), "{files:?}");
    let mut cache: std::collections::BTreeMap<PathBuf, BTreeSet<String>> = Default::default();
    let mut anchors_of = |target: &Path| -> BTreeSet<String> {
        cache
            .entry(target.to_path_buf())
            .or_insert_with(|| {
                let text = std::fs::read_to_string(repo().join(target)).unwrap_or_default();
                markdown::parse(&text).anchors
            })
            .clone()
    };
    let mut dead = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(repo().join(file)).expect("read");
        for link in markdown::parse(&text).links {
            checked += 1;
            if let Some(why) = check_link(file, &link.dest, &mut anchors_of) {
                dead.push(format!("  {file}:{}: ({}) {why}", link.line, link.dest));
            }
        }
    }
    assert!(
        dead.is_empty(),
        "{} dead links among the {checked} links of {}:\n{}",
        dead.len(),
        files.join(", "),
        dead.join("\n")
    );
}

#[test]
fn the_link_checker_finds_dead_files_and_anchors() {
    let mut anchors_of = |_: &Path| BTreeSet::from(["logs".to_string(), "logs-1".to_string()]);
    let mut check = |dest: &str| check_link("docs/x.md", dest, &mut anchors_of);
    assert_eq!(check("https://antrea.io/docs/#x"), None);
    assert_eq!(check("mailto:someone@example.com"), None);
    assert_eq!(check("../README.md"), None);
    assert_eq!(check("/Cargo.toml"), None);
    assert_eq!(check("../src/main.rs#L10"), None);
    assert_eq!(check("../README.md#logs-1"), None);
    assert_eq!(check("../deploy/"), None);
    assert!(check("../README.md#nope").is_some_and(|w| w.contains("#nope")));
    assert!(check("missing.md").is_some_and(|w| w.contains("docs/missing.md does not exist")));
    assert!(check("../../../etc/passwd").is_some_and(|w| w.contains("leaves the repository")));
    assert_eq!(percent_decode("a%20b%2"), "a b%2");
    assert_eq!(
        normalize(" externalNode.policyBypassRules[0].cidr "),
        "externalNode.policyBypassRules[].cidr"
    );
}
