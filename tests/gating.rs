//! The split between a plain `cargo test`, which must pass as a normal user, and the tests that
//! need root (network namespaces, a private Open vSwitch, a real systemd), which are compiled only
//! with the `lab` feature and run by `make test-lab`. This test reads the sources, the manifest
//! and the Makefile, and fails when the split has rotted:
//!
//! 1. **The library's unit tests.** A test whose path contains `lab_` is behind the gate
//!    (`#[cfg(feature = "lab")]` on it, on a block or module around it, or on the `mod` that brings
//!    in its file), so `cargo test` does not compile it; and every test behind the gate has `lab_`
//!    in its path, which is how `make test-lab` selects them (`--lib -- lab_`), so none runs in
//!    neither `make test-unit` nor `make test-lab`. The binary's and the crates' (crates/*) unit
//!    tests have no such tests: `make test-lab` does not look there.
//! 2. **The integration tests.** Every tests/lab_*.rs is a target that requires the feature
//!    (a `[[test]]` entry in Cargo.toml), every target that requires it is one `make test-lab`
//!    runs (`LAB_TEST_CRATES` in the Makefile), and the other targets neither name a test `lab_...`
//!    nor start the lab (`Lab::new`), which refuses to run without root.
//!
//! The scanner that finds the tests is tested here too, on a sample with the shapes it must see
//! through (strings and characters with braces, comments, nested and inline modules, macros).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const FEATURE: &str = "lab";
/// What `make test-lab` passes to the library's test binary to select its lab tests.
const LAB_FILTER: &str = "lab_";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

// ---- a small Rust lexer: enough to find tests, attributes, modules and blocks ----

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Punct(char),
}

/// The tokens of `src` with their line numbers; comments, character literals, lifetimes and
/// numbers leave nothing that matters here (`{` in a string or a char is not a block).
fn lex(src: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = src.chars().collect();
    let (mut i, mut line, mut out) = (0, 1, Vec::new());
    let count_lines = |from: usize, to: usize| c[from..to].iter().filter(|&&ch| ch == '\n').count();
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && c.get(i + 1) == Some(&'*') {
            let (start, mut depth) = (i, 0);
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            line += count_lines(start, i);
        } else if ch == '"' {
            let start = i;
            i += 1;
            let mut s = String::new();
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                if let Some(&x) = c.get(i) {
                    s.push(x);
                }
                i += 1;
            }
            i += 1;
            out.push((Tok::Str(s), line));
            line += count_lines(start, i.min(c.len()));
        } else if ch == '\'' {
            // A character literal ('x', '\n', '{') or a lifetime ('a, 'static).
            if c.get(i + 1) == Some(&'\\') {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            // Raw strings: r"..", r#".."#, br#".."# (and b"..", handled as a plain string next).
            let mut hashes = 0;
            while (word == "r" || word == "br") && c.get(i + hashes) == Some(&'#') {
                hashes += 1;
            }
            if (word == "r" || word == "br") && c.get(i + hashes) == Some(&'"') {
                let body = i + hashes + 1;
                let close: String = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                let close: Vec<char> = close.chars().collect();
                let mut j = body;
                while j < c.len() && c[j..].iter().take(close.len()).ne(close.iter()) {
                    j += 1;
                }
                out.push((Tok::Str(c[body..j].iter().collect()), line));
                line += count_lines(i, j);
                i = (j + close.len()).min(c.len());
            } else if word == "b" && c.get(i) == Some(&'"') {
                // The string itself comes next round.
            } else {
                out.push((Tok::Ident(word), line));
            }
        } else if ch.is_ascii_digit() {
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_' || c[i] == '.') {
                i += 1;
            }
        } else {
            out.push((Tok::Punct(ch), line));
            i += 1;
        }
    }
    out
}

/// An attribute's text without spaces, strings in quotes: `cfg(feature="lab")`, `tokio::test`.
fn attribute_text(toks: &[(Tok, usize)]) -> String {
    toks.iter()
        .map(|(t, _)| match t {
            Tok::Ident(s) => s.clone(),
            Tok::Str(s) => format!("\"{s}\""),
            Tok::Punct(c) => c.to_string(),
        })
        .collect()
}

/// `#[cfg(feature = "lab")]`, alone or inside an `all(..)`.
fn is_gate(attr: &str) -> bool {
    attr.starts_with("cfg(") && attr.contains(&format!("feature=\"{FEATURE}\"")) && !attr.contains("not(")
}

/// `#[test]`, `#[tokio::test(..)]`, `#[actix_rt::test]`...
fn is_test_attribute(attr: &str) -> bool {
    let base = attr.split('(').next().unwrap_or_default();
    base == "test" || base.ends_with("::test")
}

/// A test function found in the sources.
#[derive(Debug)]
struct Test {
    /// Its path as libtest prints it (`host::netlink::tests::lab::lab_reads_links`).
    path: String,
    file: PathBuf,
    line: usize,
    gated: bool,
}

/// A `mod name;` found in a file: where its file is looked for, whether it is behind the gate.
struct ModDecl {
    name: String,
    /// The inline modules around the declaration (`mod a { mod b; }`: `["a"]`).
    inline: Vec<String>,
    gated: bool,
    /// Declared with `#[path = ...]`, which [`crate_tests`] does not follow.
    has_path: bool,
}

struct Scope {
    module: Option<String>,
    gated: bool,
}

/// The tests and `mod ...;` declarations of one file whose module path is `module` and which is
/// behind the gate when `gated` (its declaration was).
fn scan(src: &str, file: &Path, module: &[String], gated: bool) -> (Vec<Test>, Vec<ModDecl>) {
    let toks = lex(src);
    let mut stack = vec![Scope { module: None, gated }];
    let (mut tests, mut mods) = (Vec::new(), Vec::new());
    let mut attrs: Vec<String> = Vec::new();
    // The gate of the item whose block opens next (a gated `fn` or `impl`).
    let mut block_gated = false;
    let mut i = 0;
    while i < toks.len() {
        let here = stack.last().map(|s| s.gated).unwrap_or(gated);
        match &toks[i].0 {
            Tok::Punct('#') => {
                let inner = toks.get(i + 1).map(|t| &t.0) == Some(&Tok::Punct('!'));
                let open = if inner { i + 2 } else { i + 1 };
                if toks.get(open).map(|t| &t.0) != Some(&Tok::Punct('[')) {
                    i += 1;
                    continue;
                }
                let mut depth = 0;
                let mut end = open;
                while end < toks.len() {
                    match toks[end].0 {
                        Tok::Punct('[') => depth += 1,
                        Tok::Punct(']') => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    end += 1;
                }
                let text = attribute_text(&toks[open + 1..end.min(toks.len())]);
                if inner {
                    if is_gate(&text) {
                        if let Some(scope) = stack.last_mut() {
                            scope.gated = true;
                        }
                    }
                } else {
                    attrs.push(text);
                }
                i = end + 1;
                continue;
            }
            Tok::Ident(word) if word == "mod" => {
                if let (Some((Tok::Ident(name), _)), Some((next, _))) = (toks.get(i + 1), toks.get(i + 2)) {
                    let item_gated = here || attrs.iter().any(|a| is_gate(a));
                    if *next == Tok::Punct(';') {
                        let inline = stack.iter().filter_map(|s| s.module.clone()).collect();
                        mods.push(ModDecl {
                            name: name.clone(),
                            inline,
                            gated: item_gated,
                            has_path: attrs.iter().any(|a| a.starts_with("path=")),
                        });
                        attrs.clear();
                        i += 3;
                        continue;
                    }
                    if *next == Tok::Punct('{') {
                        stack.push(Scope {
                            module: Some(name.clone()),
                            gated: item_gated,
                        });
                        attrs.clear();
                        i += 3;
                        continue;
                    }
                }
            }
            Tok::Ident(word) if word == "fn" => {
                let item_gated = here || attrs.iter().any(|a| is_gate(a));
                if let Some((Tok::Ident(name), line)) = toks.get(i + 1) {
                    if attrs.iter().any(|a| is_test_attribute(a)) {
                        let path: Vec<String> = module
                            .iter()
                            .cloned()
                            .chain(stack.iter().filter_map(|s| s.module.clone()))
                            .chain(std::iter::once(name.clone()))
                            .collect();
                        tests.push(Test {
                            path: path.join("::"),
                            file: file.to_path_buf(),
                            line: *line,
                            gated: item_gated,
                        });
                    }
                }
                block_gated = item_gated;
                attrs.clear();
            }
            Tok::Punct('{') => {
                let item_gated = here || block_gated || attrs.iter().any(|a| is_gate(a));
                stack.push(Scope {
                    module: None,
                    gated: item_gated,
                });
                attrs.clear();
                block_gated = false;
            }
            Tok::Punct('}') => {
                if stack.len() > 1 {
                    stack.pop();
                }
                attrs.clear();
                block_gated = false;
            }
            Tok::Punct(';') => {
                attrs.clear();
                block_gated = false;
            }
            _ => {}
        }
        i += 1;
    }
    (tests, mods)
}

/// Every test of the crate whose root file is `root_file`, following `mod ...;` declarations.
fn crate_tests(root_file: &Path) -> Vec<Test> {
    let mut tests = Vec::new();
    // (file, module path, gated)
    let mut todo = vec![(root_file.to_path_buf(), Vec::<String>::new(), false)];
    while let Some((file, module, gated)) = todo.pop() {
        let src = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let (found, mods) = scan(&src, &file, &module, gated);
        tests.extend(found);
        // A crate root or mod.rs declares its children beside it; `a.rs` declares them in `a/`.
        let dir = match file.file_name().and_then(|n| n.to_str()) {
            Some("lib.rs" | "main.rs" | "mod.rs") => file.parent().map(Path::to_path_buf),
            _ => Some(file.with_extension("")),
        }
        .unwrap_or_default();
        for m in mods {
            assert!(
                !m.has_path,
                "{}: `mod {};` has a #[path], which this test does not follow",
                file.display(),
                m.name
            );
            let mut base = dir.clone();
            base.extend(&m.inline);
            let candidates = [
                base.join(format!("{}.rs", m.name)),
                base.join(&m.name).join("mod.rs"),
            ];
            let child = candidates
                .iter()
                .find(|p| p.is_file())
                .unwrap_or_else(|| panic!("{}: no file for `mod {};`", file.display(), m.name));
            let mut path = module.clone();
            path.extend(m.inline.iter().cloned());
            path.push(m.name.clone());
            todo.push((child.clone(), path, m.gated));
        }
    }
    tests
}

fn describe(tests: &[&Test]) -> String {
    tests
        .iter()
        .map(|t| format!("  {} ({}:{})", t.path, t.file.display(), t.line))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_librarys_root_tests_are_gated_and_named_for_the_filter() {
    let tests = crate_tests(&root().join("src/lib.rs"));
    let ungated: Vec<&Test> = tests
        .iter()
        .filter(|t| t.path.contains(LAB_FILTER) && !t.gated)
        .collect();
    assert!(
        ungated.is_empty(),
        "tests named `{LAB_FILTER}...` (they need root) that a plain `cargo test` compiles: gate them \
         with #[cfg(feature = \"{FEATURE}\")]:\n{}",
        describe(&ungated)
    );
    let unselected: Vec<&Test> = tests
        .iter()
        .filter(|t| t.gated && !t.path.contains(LAB_FILTER))
        .collect();
    assert!(
        unselected.is_empty(),
        "tests behind the `{FEATURE}` feature without `{LAB_FILTER}` in their path: `make test-lab` \
         (`--lib -- {LAB_FILTER}`) does not run them, and `cargo test` does not compile them:\n{}",
        describe(&unselected)
    );
    // The scan sees the library: its many tests, and the lab ones behind the gate.
    let gated = tests.iter().filter(|t| t.gated).count();
    assert!(tests.len() > 300, "only {} tests found in src/", tests.len());
    assert!(gated >= 10, "only {gated} lab tests found in src/");
}

#[test]
fn the_binary_and_the_crates_have_no_root_tests() {
    let mut roots = vec![root().join("src/main.rs")];
    let crates = std::fs::read_dir(root().join("crates")).expect("crates/");
    for entry in crates {
        let lib = entry.expect("crates/ entry").path().join("src/lib.rs");
        if lib.is_file() {
            roots.push(lib);
        }
    }
    assert!(roots.len() > 1, "no crate found under crates/");
    for file in roots {
        let tests = crate_tests(&file);
        let lab: Vec<&Test> = tests
            .iter()
            .filter(|t| t.gated || t.path.contains(LAB_FILTER))
            .collect();
        assert!(
            lab.is_empty(),
            "lab tests in {}: `make test-lab` runs only the library's and tests/; put them there:\n{}",
            file.display(),
            describe(&lab)
        );
    }
}

/// The names `make test-lab` passes as `--test`: LAB_TEST_CRATES, its wildcard expanded.
fn make_test_lab_targets() -> BTreeSet<String> {
    let makefile = std::fs::read_to_string(root().join("Makefile")).expect("Makefile");
    let line = makefile
        .lines()
        .find(|l| l.starts_with("LAB_TEST_CRATES :="))
        .expect("LAB_TEST_CRATES := in the Makefile");
    const WILDCARD: &str = "$(basename $(notdir $(wildcard tests/lab_*.rs)))";
    let value = line.trim_start_matches("LAB_TEST_CRATES :=");
    assert!(
        value.contains(WILDCARD),
        "LAB_TEST_CRATES no longer takes every tests/lab_*.rs ({WILDCARD}): {line}"
    );
    let mut names: BTreeSet<String> = value
        .replace(WILDCARD, " ")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert!(
        !names.iter().any(|n| n.contains('$')),
        "LAB_TEST_CRATES has an expression this test cannot read: {line}"
    );
    for entry in std::fs::read_dir(root().join("tests")).expect("tests/") {
        let name = entry
            .expect("tests/ entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if let Some(stem) = name.strip_prefix(LAB_FILTER).and_then(|n| n.strip_suffix(".rs")) {
            names.insert(format!("{LAB_FILTER}{stem}"));
        }
    }
    names
}

/// The agent package's integration-test targets: name, source file, whether they require `lab`.
fn test_targets() -> Vec<(String, PathBuf, bool)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(&cargo)
        .args(["metadata", "--no-deps", "--format-version", "1", "--frozen"])
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("running {cargo} metadata: {e}"));
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let agent = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .find(|p| p["name"] == "antrea-vm-agent")
        .expect("the agent's package");
    assert!(
        agent["features"].get(FEATURE).is_some(),
        "Cargo.toml declares no `{FEATURE}` feature"
    );
    agent["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .filter(|t| {
            t["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "test"))
        })
        .map(|t| {
            let requires = t["required-features"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f == FEATURE));
            (
                t["name"].as_str().expect("a target's name").to_string(),
                PathBuf::from(t["src_path"].as_str().expect("a target's src_path")),
                requires,
            )
        })
        .collect()
}

#[test]
fn integration_tests_needing_root_require_the_feature_and_are_in_the_makefile() {
    let targets = test_targets();
    let make = make_test_lab_targets();
    let names: BTreeSet<&str> = targets.iter().map(|(n, _, _)| n.as_str()).collect();
    let mut problems = Vec::new();
    for (name, src, requires) in &targets {
        if name.starts_with(LAB_FILTER) && !requires {
            problems.push(format!(
                "{name}: a tests/{LAB_FILTER}*.rs without `required-features = [\"{FEATURE}\"]` \
                 (a [[test]] entry in Cargo.toml)"
            ));
        }
        if *requires && !make.contains(name) {
            problems.push(format!(
                "{name}: requires `{FEATURE}` but `make test-lab` does not run it (LAB_TEST_CRATES)"
            ));
        }
        if !requires {
            let text = std::fs::read_to_string(src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
            let (tests, _) = scan(&text, src, &[], false);
            for t in tests.iter().filter(|t| t.path.contains(LAB_FILTER)) {
                problems.push(format!(
                    "{name}: test {} ({}:{}) is named as needing root, but the target does not \
                     require `{FEATURE}`",
                    t.path,
                    src.display(),
                    t.line
                ));
            }
            // Spelled in two so that this file does not match itself.
            if text.contains(concat!("Lab", "::new(")) {
                problems.push(format!(
                    "{name}: starts the lab (Lab::new, root) but does not require `{FEATURE}`"
                ));
            }
        }
    }
    for name in &make {
        if !names.contains(name.as_str()) {
            problems.push(format!("{name}: in LAB_TEST_CRATES but not a test target"));
        } else if !targets.iter().any(|(n, _, r)| n == name && *r) {
            problems.push(format!(
                "{name}: `make test-lab` runs it but it does not require `{FEATURE}`, so \
                 `cargo test` runs it too"
            ));
        }
    }
    assert!(problems.is_empty(), "the lab split:\n{}", problems.join("\n"));
    assert!(
        targets.iter().filter(|(_, _, r)| *r).count() > 1,
        "no integration test requires `{FEATURE}`: {targets:?}"
    );
}

#[test]
fn the_scan_sees_through_strings_comments_macros_and_modules() {
    let src = r###"
//! fn lab_in_a_comment() {
use x::y; /* a { block } comment with #[test] fn lab_nope() { */
#[cfg(test)]
#[cfg(feature = "lab")]
mod lab_tests;
#[cfg(test)]
mod tests;
#[cfg(all(test, feature = "lab"))]
mod harness;

#[cfg(test)]
mod inline {
    const S: &str = "{ not a block";
    const R: &str = r#"} " neither"#;
    const C: char = '{';
    fn helper<'a>(x: &'a str) -> &'a str { x }

    #[test]
    fn plain() { let _ = format!("{}}}", 1); }

    #[cfg(feature = "lab")]
    mod lab {
        use super::*;
        #[tokio::test(flavor = "multi_thread")]
        async fn lab_in_the_gated_module() {}
        #[test]
        fn forgot_the_name() {}
    }

    #[test]
    #[cfg(feature = "lab")]
    fn lab_gated_itself() {}

    #[test]
    fn lab_not_gated() {}

    proptest! {
        #[test]
        fn in_a_macro(x in 0..3u8) { assert!(x < 3); }
    }
    mod nested;
}
"###;
    let (tests, mods) = scan(src, Path::new("sample.rs"), &["m".to_string()], false);
    let seen: Vec<(&str, bool)> = tests.iter().map(|t| (t.path.as_str(), t.gated)).collect();
    assert_eq!(
        seen,
        vec![
            ("m::inline::plain", false),
            ("m::inline::lab::lab_in_the_gated_module", true),
            ("m::inline::lab::forgot_the_name", true),
            ("m::inline::lab_gated_itself", true),
            ("m::inline::lab_not_gated", false),
            ("m::inline::in_a_macro", false),
        ]
    );
    let decls: Vec<(&str, &[String], bool)> = mods
        .iter()
        .map(|m| (m.name.as_str(), m.inline.as_slice(), m.gated))
        .collect();
    assert_eq!(
        decls,
        vec![
            ("lab_tests", &[][..], true),
            ("tests", &[][..], false),
            ("harness", &[][..], true),
            ("nested", &["inline".to_string()][..], false),
        ]
    );
    // A file whose declaration was gated: everything in it is.
    let (tests, _) = scan("#[test]\nfn lab_x() {}\n", Path::new("f.rs"), &[], true);
    assert!(tests[0].gated);
    // An inner attribute gates its file.
    let (tests, _) = scan(
        "#![cfg(feature = \"lab\")]\n#[test]\nfn lab_x() {}\n",
        Path::new("f.rs"),
        &[],
        false,
    );
    assert!(tests[0].gated);
}
