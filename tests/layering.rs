//! The layering of the agent's modules (docs/architecture.md, section 5): a module may import
//! only from below it. This test reads the sources and fails, naming the file and the line, when
//! an import goes the wrong way along one of the pairs that once formed circles
//! (`messages ⇄ k8s`, `sources ⇄ k8s`, `messages ⇄ packetin`, `actors ⇄ api`), or when a leaf
//! imports anything of the agent. Test code counts too: a `use` in a test module is still an edge
//! between the modules. The pure policy core is a crate of its own (`crates/policy`): that it
//! names no module of the agent (`messages`, `fqdn`, `k8s`, ...) the compiler checks, not this
//! test.
//!
//! The wiring too: no actor but the supervisor and `actors/wiring.rs` names the whole `Deps`,
//! `Peers` or `Config` (issue 17, narrow wiring: each actor's deps carry only the settings it
//! reads).
//!
//! Rule 8 too: no file under `src/actors` (test code and comments included) names the OpenFlow
//! codec's byte-level parts (`ovs::openflow::wire`, `oxm`, `messages`, or an encoder or decoder
//! of `actions`); the flow installer holds switch flows by the opaque keys of
//! `ovs::openflow::packed`.
//!
//! It also measures the table of section 5.1 (which module names which, how often, in product
//! code: comments, `#[cfg(test)]` items and the files they declare left out), prints it
//! (`cargo test --test layering -- --nocapture`), and checks that the pairs of modules still
//! importing each other are exactly the ones section 5.2 lists.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

#[path = "support/source_scan.rs"]
mod source_scan;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use source_scan::{child_paths, product_lines, rust_files};

/// (module, module it must not name): the lower one of each pair never names the upper one.
const FORBIDDEN: &[(&str, &str)] = &[
    ("k8s", "messages"),
    ("k8s", "sources"),
    ("packetin", "messages"),
    // The actors fill the metrics registry (`telemetry`) and the policy views (`views`), which sit
    // below them; `api` reads the actors (rule 9).
    ("actors", "api"),
];

/// Modules at the bottom: they name no other module of the agent.
const LEAVES: &[&str] = &["attachment", "error_kind", "parallel", "telemetry"];

/// The pairs of modules whose product code still names each other (docs/architecture.md §5.2),
/// each as (a, b) with a < b. Breaking one: remove it here and from the document. Making one:
/// don't.
const REMAINING_CYCLES: &[(&str, &str)] = &[];

/// Every `.rs` file of a top-level module: `src/<module>.rs` and everything under `src/<module>/`.
fn files_of(module: &str) -> Vec<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let file = src.join(format!("{module}.rs"));
    if file.is_file() {
        files.push(file);
    }
    files.extend(rust_files(&src.join(module)));
    assert!(
        !files.is_empty(),
        "module {module} has no source files under src/"
    );
    files
}

/// Every place in `text` that names `crate::<target>` (the whole module name, so `k8s` is not
/// found in `k8s_x`), as (line number, line).
fn naming(text: &str, target: &str) -> Vec<(usize, String)> {
    let needle = format!("crate::{target}");
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            line.match_indices(&needle).any(|(at, _)| {
                !line[at + needle.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            })
        })
        .map(|(n, line)| (n + 1, line.trim().to_string()))
        .collect()
}

/// The top-level modules of the library, read from `src/lib.rs`.
fn top_level_modules() -> Vec<String> {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
    let text = std::fs::read_to_string(&lib).expect("src/lib.rs");
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').to_string())
        .collect()
}

fn violations(module: &str, targets: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for file in files_of(module) {
        let text = std::fs::read_to_string(&file).expect("source file");
        for target in targets {
            for (line, code) in naming(&text, target) {
                found.push(format!(
                    "{}:{line}: {module} must not import {target}: {code}",
                    file.strip_prefix(env!("CARGO_MANIFEST_DIR"))
                        .unwrap_or(&file)
                        .display()
                ));
            }
        }
    }
    found
}

#[test]
fn no_module_imports_one_above_it_along_the_former_circles() {
    let mut found = Vec::new();
    for (module, target) in FORBIDDEN {
        found.extend(violations(module, &[target.to_string()]));
    }
    assert!(
        found.is_empty(),
        "imports against the layering:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_leaves_import_nothing_of_the_agent() {
    let modules = top_level_modules();
    assert!(
        modules.iter().any(|m| m == "messages") && modules.iter().any(|m| m == "attachment"),
        "src/lib.rs lists {modules:?}"
    );
    let mut found = Vec::new();
    for leaf in LEAVES {
        let others: Vec<String> = modules.iter().filter(|m| m != leaf).cloned().collect();
        found.extend(violations(leaf, &others));
    }
    assert!(
        found.is_empty(),
        "a leaf imports the agent:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_finds_an_import_and_only_whole_module_names() {
    let text = "use std::fmt;\nuse crate::messages::EntityRef;\nuse crate::messages_x::Y;\n";
    assert_eq!(
        naming(text, "messages"),
        vec![(2, "use crate::messages::EntityRef;".to_string())]
    );
    assert!(naming("let x = crate::k8s_helpers::f();", "k8s").is_empty());
    assert_eq!(naming("pub use crate::k8s;", "k8s").len(), 1);
}

/// The codec's modules that deal in bytes (rule 8), as the first segment of a path under
/// `openflow::`; `actions` is the flow model's too, so only its encoders and decoders count.
const OPENFLOW_BYTE_MODULES: &[&str] = &["wire", "oxm", "messages"];

/// The paths a `use` tree (or a plain path) starting at `text` names, whitespace removed:
/// `{wire::{Reader, Writer}, oxm}` gives `wire::Reader`, `wire::Writer` and `oxm`.
fn use_tree_paths(text: &str) -> Vec<String> {
    fn expand(s: &[char], i: &mut usize, prefix: &str, out: &mut Vec<String>) {
        if s.get(*i) == Some(&'{') {
            *i += 1;
            loop {
                if s.get(*i) == Some(&'}') {
                    *i += 1;
                    return;
                }
                expand(s, i, prefix, out);
                match s.get(*i) {
                    Some(',') => *i += 1,
                    Some('}') => {
                        *i += 1;
                        return;
                    }
                    _ => return,
                }
            }
        }
        let start = *i;
        while s.get(*i).is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_') {
            *i += 1;
        }
        let path: String = prefix.chars().chain(s[start..*i].iter().copied()).collect();
        if s.get(*i) == Some(&':') && s.get(*i + 1) == Some(&':') {
            *i += 2;
            expand(s, i, &format!("{path}::"), out);
        } else {
            out.push(path);
        }
    }
    let chars: Vec<char> = text.chars().filter(|c| !c.is_whitespace()).collect();
    let mut out = Vec::new();
    expand(&chars, &mut 0, "", &mut out);
    out
}

/// Whether a path under `openflow::` names the codec's bytes.
fn is_openflow_bytes(path: &str) -> bool {
    let mut segments = path.split("::");
    let first = segments.next().unwrap_or_default();
    OPENFLOW_BYTE_MODULES.contains(&first)
        || (first == "actions"
            && segments
                .next()
                .is_some_and(|s| s.starts_with("encode") || s.starts_with("decode")))
}

/// Every place in `text` that names the codec's bytes, as (line number, what): paths and `use`
/// trees under `openflow::` (`ovs::openflow::` or the crate's own `ovs_openflow::`), and
/// `actions::encode…`/`actions::decode…` reached through a shorter path.
fn openflow_bytes_named(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("openflow::") {
        let line = text[..at].matches('\n').count() + 1;
        for path in use_tree_paths(&text[at + "openflow::".len()..]) {
            if is_openflow_bytes(&path) {
                found.push((line, format!("openflow::{path}")));
            }
        }
    }
    for needle in ["actions::encode", "actions::decode"] {
        for (at, _) in text.match_indices(needle) {
            if !text[..at].ends_with("openflow::") {
                found.push((text[..at].matches('\n').count() + 1, needle.to_string()));
            }
        }
    }
    found
}

#[test]
fn no_actor_knows_openflow_bytes() {
    let mut found = Vec::new();
    for file in files_of("actors") {
        let text = std::fs::read_to_string(&file).expect("source file");
        for (line, what) in openflow_bytes_named(&text) {
            found.push(format!(
                "{}:{line}: actors must not know OpenFlow bytes (rule 8): {what}",
                file.strip_prefix(env!("CARGO_MANIFEST_DIR"))
                    .unwrap_or(&file)
                    .display()
            ));
        }
    }
    assert!(
        found.is_empty(),
        "OpenFlow bytes outside ovs:\n{}",
        found.join("\n")
    );
}

/// Where `text` names `word` as a whole identifier (so `WatcherDeps` is not `Deps`), comments
/// left out (a trailing one from its `//`): (line, the line).
fn identifier_named(text: &str, word: &str) -> Vec<(usize, String)> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    product_lines(text, &[], &mut Vec::new())
        .into_iter()
        .filter(|(_, line)| {
            let code = line.split("//").next().unwrap_or_default();
            code.match_indices(word).any(|(at, _)| {
                !code[..at].chars().next_back().is_some_and(is_ident)
                    && !code[at + word.len()..].chars().next().is_some_and(is_ident)
            })
        })
        .collect()
}

/// Issue 17, narrow wiring: an actor gets its own part of `Deps` and typed recipients for its
/// outputs; only the supervisor and the wiring see the whole `Deps`, every address (`Peers`) and
/// the whole configuration (`Config`: an actor's deps carry the settings it reads, one by one).
#[test]
fn no_actor_sees_the_whole_deps_or_every_address() {
    let mut found = Vec::new();
    for file in files_of("actors") {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let at_top = file
            .parent()
            .and_then(|d| d.file_name())
            .is_some_and(|d| d == "actors");
        if at_top && matches!(name, "supervisor.rs" | "wiring.rs" | "mod.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("source file");
        for word in ["Deps", "Peers", "Config"] {
            for (line, text) in identifier_named(&text, word) {
                found.push(format!(
                    "{}:{line}: names `{word}`: {}",
                    file.strip_prefix(env!("CARGO_MANIFEST_DIR"))
                        .unwrap_or(&file)
                        .display(),
                    text.trim()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "actors reaching past their own deps and outputs:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_whole_word_check_tells_deps_from_an_actors_deps() {
    let text = "    deps: Deps,\n    deps: WatcherDeps,\n    /// the whole `Deps`\n    Deps::default()\n    x: u8, // not Deps\n";
    let lines: Vec<usize> = identifier_named(text, "Deps")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(lines, vec![1, 4]);
}

#[test]
fn the_openflow_bytes_check_sees_paths_and_use_trees() {
    // What held.rs imported before `packed`.
    let text = "use crate::ovs::openflow::actions::{encode_instructions, normalize_actions};\n\
                use crate::ovs::openflow::oxm::{decode_match, encode_match};\n\
                use crate::ovs::openflow::wire::{Reader, Writer};\n";
    assert_eq!(
        openflow_bytes_named(text),
        vec![
            (1, "openflow::actions::encode_instructions".to_string()),
            (2, "openflow::oxm::decode_match".to_string()),
            (2, "openflow::oxm::encode_match".to_string()),
            (3, "openflow::wire::Reader".to_string()),
            (3, "openflow::wire::Writer".to_string()),
        ]
    );
    let nested = "use crate::ovs::openflow::{\n    Flow,\n    wire::{self, Writer},\n};\nlet m = ovs_openflow::messages::encode_hello(1);\nuse crate::ovs::openflow::actions;\nactions::decode_actions(&b);\n";
    assert_eq!(
        openflow_bytes_named(nested),
        vec![
            (1, "openflow::wire::self".to_string()),
            (1, "openflow::wire::Writer".to_string()),
            (5, "openflow::messages::encode_hello".to_string()),
            (7, "actions::decode".to_string()),
        ]
    );
    // The flow model, its normalization and the packed keys are fine.
    let allowed = "use crate::ovs::openflow::actions::normalize_actions;\n\
                   use crate::ovs::openflow::packed::{content_digest, PackedFlowKey};\n\
                   use crate::ovs::openflow::{normalize_flow, Action, Flow, FlowKey};\n\
                   use crate::messages::Resync;\n";
    assert!(openflow_bytes_named(allowed).is_empty());
}

/// The product code of one file: without comment lines and without `#[cfg(test)]` items; the
/// names of the modules such items declare in other files (`#[cfg(test)] mod tests;`) go to
/// `test_mods`.
fn product_code(text: &str, test_mods: &mut Vec<String>) -> String {
    product_lines(text, &["#[cfg(test)]"], test_mods)
        .into_iter()
        .map(|(_, line)| line + "\n")
        .collect()
}

/// module → (module it names → occurrences), product code only.
fn import_counts() -> BTreeMap<String, BTreeMap<String, usize>> {
    let modules = top_level_modules();
    let mut table = BTreeMap::new();
    for module in &modules {
        // First every file's product code and the files its test items declare, then the
        // counts over the files no test item declared (a parent sorts after its own folder).
        let mut skipped: Vec<PathBuf> = Vec::new();
        let mut codes = Vec::new();
        for file in files_of(module) {
            let text = std::fs::read_to_string(&file).expect("source file");
            let mut test_mods = Vec::new();
            let code = product_code(&text, &mut test_mods);
            for name in test_mods {
                skipped.extend(child_paths(&file, &name));
            }
            codes.push((file, code));
        }
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for (file, code) in &codes {
            if skipped.iter().any(|s| file.starts_with(s)) {
                continue;
            }
            for target in modules.iter().filter(|t| *t != module) {
                let n = naming(code, target).len();
                if n > 0 {
                    *counts.entry(target.clone()).or_default() += n;
                }
            }
        }
        table.insert(module.clone(), counts);
    }
    table
}

#[test]
fn the_import_table_has_only_the_documented_cycles() {
    let table = import_counts();
    println!("| module | imports (lines naming it) |\n|---|---|");
    for (module, counts) in &table {
        let mut row: Vec<(&String, &usize)> = counts.iter().collect();
        row.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let cells: Vec<String> = row.iter().map(|(m, n)| format!("`{m}` {n}")).collect();
        let cells = if cells.is_empty() {
            "—".to_string()
        } else {
            cells.join(", ")
        };
        println!("| `{module}` | {cells} |");
    }
    let mut cycles = BTreeSet::new();
    for (a, counts) in &table {
        for b in counts.keys() {
            if a < b && table.get(b).is_some_and(|c| c.contains_key(a)) {
                cycles.insert((a.clone(), b.clone()));
            }
        }
    }
    let expected: BTreeSet<(String, String)> = REMAINING_CYCLES
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(
        cycles, expected,
        "pairs of modules importing each other (product code); update docs/architecture.md §5.2"
    );
}

#[test]
fn product_code_leaves_out_comments_and_test_items() {
    let text = "use crate::a::X;\n// crate::b\n#[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod t {\n    use crate::c;\n    fn f() {}\n}\nuse crate::d;\n";
    let mut test_mods = Vec::new();
    let code = product_code(text, &mut test_mods);
    assert_eq!(code, "use crate::a::X;\nuse crate::d;\n");
    assert_eq!(test_mods, vec!["tests".to_string()]);
    assert_eq!(
        child_paths(Path::new("src/x/mod.rs"), "tests")[0],
        PathBuf::from("src/x/tests.rs")
    );
    assert_eq!(
        child_paths(Path::new("src/x/y.rs"), "tests")[1],
        PathBuf::from("src/x/y/tests")
    );
}
