//! The split between a plain `cargo test`, which must pass as a normal user, and the tests that
//! need root (network namespaces, a private Open vSwitch, a real systemd), which are compiled only
//! with the `lab` feature and run by `make test-lab`. This test reads the sources, the manifest
//! and the Makefile, and fails when the split has rotted:
//!
//! 1. **The library's unit tests.** A test whose path contains `lab_` is behind the gate (a
//!    `#[cfg]` that implies `feature = "lab"` on it, on an item or module around it, on the `mod`
//!    that brings in its file, or `#![cfg]` in that file), so `cargo test` does not compile it; and
//!    every test behind the gate has `lab_` in its path, which is how `make test-lab` selects them
//!    (`--lib -- lab_`), so none runs in neither `make test-unit` nor `make test-lab`. The binary's
//!    and the crates' (crates/*) unit tests have no such tests: `make test-lab` does not look there.
//! 2. **The integration tests.** Every tests/lab_*.rs is a target that requires the feature
//!    (a `[[test]]` entry in Cargo.toml), every target that requires it is one `make test-lab`
//!    runs (`LAB_TEST_CRATES` in the Makefile), and the other targets are `tests/<name>.rs` (what
//!    `UNIT_TEST_CRATES` lists for `make test`), and neither they nor the modules they include
//!    (`mod support;`, `#[path]`) name a test `lab_...` or start the lab (`Lab::new`), which
//!    refuses to run without root.
//!
//! The sources are parsed with `syn`; a cfg is read as a predicate, so `any(feature = "lab", unix)`
//! is no gate and `all(not(x), feature = "lab")` is one. Macros are token streams to syn: tests
//! written out in a macro's body (`proptest! { #[test] fn .. }`) are found by a token walk, and a
//! `macro_rules!` whose body defines `#[test] fn $name` is taken to define a test named after each
//! identifier of each call (`case!(lab_x)`): a guess, so such names only ever make the check
//! stricter. The scanner is tested here too, on a sample crate with the shapes it must get right.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use proc_macro2::{Delimiter, Ident, TokenStream, TokenTree};
use serde_json::Value;
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};
use syn::{Attribute, Expr, ExprLit, Item, Lit, Meta, Token, Type};

const FEATURE: &str = "lab";
/// What `make test-lab` passes to the library's test binary to select its lab tests.
const LAB_FILTER: &str = "lab_";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

// ---- cfg predicates and attributes ----

/// Whether a cfg predicate holds only with the feature on: `feature = "lab"`, an `all(..)` with
/// such a member, an `any(..)` whose members all are. A `not(..)` never is.
fn implies_lab(meta: &Meta) -> bool {
    match meta {
        Meta::NameValue(nv) => {
            nv.path.is_ident("feature") && str_value(&nv.value).as_deref() == Some(FEATURE)
        }
        Meta::List(list) => {
            let Ok(members) = list.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated) else {
                return false;
            };
            if list.path.is_ident("all") {
                members.iter().any(implies_lab)
            } else {
                list.path.is_ident("any") && !members.is_empty() && members.iter().all(implies_lab)
            }
        }
        Meta::Path(_) => false,
    }
}

/// `#[cfg(P)]` where P implies the feature (an item's cfg attributes must all hold: one suffices).
fn is_gate(meta: &Meta) -> bool {
    matches!(meta, Meta::List(l) if l.path.is_ident("cfg") && l.parse_args::<Meta>().is_ok_and(|p| implies_lab(&p)))
}

fn gates(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| is_gate(&a.meta))
}

/// `#[test]`, `#[tokio::test(..)]`, `#[actix_rt::test]`...
fn is_test(meta: &Meta) -> bool {
    meta.path().segments.last().is_some_and(|s| s.ident == "test")
}

fn str_value(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Lit(ExprLit { lit: Lit::Str(s), .. }) => Some(s.value()),
        _ => None,
    }
}

fn path_attr(attrs: &[Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        Meta::NameValue(nv) if nv.path.is_ident("path") => str_value(&nv.value),
        _ => None,
    })
}

fn line(ident: &Ident) -> usize {
    ident.span().start().line
}

// ---- macro bodies: a token walk ----

/// What a macro's tokens hold: `#[test]`-like fns (their name, `None` for a `$name`; whether their
/// own attributes gate them; line), the lines of `Lab::new(..)` calls, the other identifiers.
#[derive(Default)]
struct MacroBody {
    tests: Vec<(Option<String>, bool, usize)>,
    lab_starts: Vec<usize>,
    idents: Vec<String>,
}

fn walk_tokens(tokens: TokenStream, out: &mut MacroBody) {
    let tts: Vec<TokenTree> = tokens.into_iter().collect();
    let mut attrs: Vec<Meta> = Vec::new();
    let punct = |i: usize, c: char| matches!(tts.get(i), Some(TokenTree::Punct(p)) if p.as_char() == c);
    for (i, tt) in tts.iter().enumerate() {
        match tt {
            TokenTree::Group(g) => {
                if g.delimiter() == Delimiter::Bracket && punct(i.wrapping_sub(1), '#') {
                    attrs.extend(syn::parse2::<Meta>(g.stream()).ok());
                } else if g.delimiter() == Delimiter::Brace {
                    attrs.clear();
                }
                walk_tokens(g.stream(), out);
            }
            TokenTree::Punct(p) if p.as_char() == ';' => attrs.clear(),
            TokenTree::Ident(id) if id == "fn" => {
                let name = match tts.get(i + 1) {
                    Some(TokenTree::Ident(name)) => Some(Some(name.to_string())),
                    Some(TokenTree::Punct(p)) if p.as_char() == '$' => Some(None),
                    _ => None,
                };
                if let (Some(name), true) = (name, attrs.iter().any(is_test)) {
                    out.tests.push((name, attrs.iter().any(is_gate), line(id)));
                }
                attrs.clear();
            }
            TokenTree::Ident(id) if id == "Lab" && punct(i + 1, ':') && punct(i + 2, ':') => {
                let new = matches!(tts.get(i + 3), Some(TokenTree::Ident(n)) if n == "new");
                if new
                    && matches!(tts.get(i + 4), Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis)
                {
                    out.lab_starts.push(line(id));
                }
            }
            TokenTree::Ident(id) => out.idents.push(id.to_string()),
            TokenTree::Punct(_) | TokenTree::Literal(_) => {}
        }
    }
}

// ---- the crate walk ----

/// A test function found in the sources.
#[derive(Debug)]
struct Test {
    /// Its path as libtest prints it (`host::netlink::tests::lab::lab_reads_links`).
    path: String,
    /// `file:line`.
    at: String,
    gated: bool,
    /// An identifier of a call of a test-defining `macro_rules!`, which may not be a test's name.
    guessed: bool,
}

/// The file being read, and where its `mod x;` and `#[path = ..] mod x;` look for x's file.
#[derive(Clone, Default)]
struct Place {
    file: PathBuf,
    dir: PathBuf,
    path_dir: PathBuf,
}

#[derive(Default)]
struct Walker {
    place: Place,
    module: Vec<String>,
    gated: bool,
    /// Inside `impl Lab` or `impl .. for Lab`, where `Lab::new(` defines the lab rather than starts it.
    in_lab_impl: bool,
    tests: Vec<Test>,
    /// The `macro_rules!` that define tests, by name (rustc too wants them defined before a call).
    test_macros: BTreeMap<String, Vec<(Option<String>, bool, usize)>>,
    /// Where the crate starts the lab (`file:line`).
    lab_starts: Vec<String>,
}

impl Walker {
    fn push_test(&mut self, name: String, line: usize, gated: bool, guessed: bool) {
        let path = [self.module.as_slice(), &[name]].concat().join("::");
        let (at, gated) = (
            format!("{}:{line}", self.place.file.display()),
            self.gated || gated,
        );
        self.tests.push(Test {
            path,
            at,
            gated,
            guessed,
        });
    }

    fn lab_start(&mut self, line: usize) {
        if !self.in_lab_impl {
            self.lab_starts
                .push(format!("{}:{line}", self.place.file.display()));
        }
    }

    /// A module's file. It declares its children beside it if it `owns_dir` (a crate's root, or a
    /// file a `#[path]` named) or is a mod.rs; `a.rs` declares them in `a/`.
    fn visit_module_file(&mut self, file: PathBuf, owns_dir: bool) {
        let src = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let ast = syn::parse_file(&src).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let path_dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
        let owns_dir = owns_dir || file.file_name().is_some_and(|n| n == "mod.rs");
        let dir = if owns_dir {
            path_dir.clone()
        } else {
            file.with_extension("")
        };
        let (place, gated) = (
            std::mem::replace(&mut self.place, Place { file, dir, path_dir }),
            self.gated,
        );
        self.gated |= gates(&ast.attrs);
        self.visit_file(&ast);
        (self.place, self.gated) = (place, gated);
    }
}

impl<'ast> Visit<'ast> for Walker {
    fn visit_item(&mut self, item: &'ast Item) {
        let attrs: &[Attribute] = match item {
            Item::Mod(i) => &i.attrs, // the inner attributes of an inline module too
            Item::Fn(i) => &i.attrs,
            Item::Macro(i) => &i.attrs,
            _ => &[],
        };
        let was = self.gated;
        self.gated |= gates(attrs);
        visit::visit_item(self, item);
        self.gated = was;
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        let name = m.ident.to_string();
        let by_path = path_attr(&m.attrs);
        self.module.push(name.clone());
        let Place { file, dir, path_dir } = self.place.clone();
        if let Some((_, items)) = &m.content {
            let dir = by_path.map_or_else(|| dir.join(&name), |p| path_dir.join(p));
            let place = std::mem::replace(
                &mut self.place,
                Place {
                    file,
                    dir: dir.clone(),
                    path_dir: dir,
                },
            );
            items.iter().for_each(|item| self.visit_item(item));
            self.place = place;
        } else if let Some(p) = by_path {
            self.visit_module_file(path_dir.join(p), true);
        } else {
            let candidates = [dir.join(format!("{name}.rs")), dir.join(&name).join("mod.rs")];
            let found = candidates.into_iter().find(|p| p.is_file());
            let found = found.unwrap_or_else(|| panic!("{}: no file for `mod {name};`", file.display()));
            self.visit_module_file(found, false);
        }
        self.module.pop();
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if f.attrs.iter().any(|a| is_test(&a.meta)) {
            self.push_test(f.sig.ident.to_string(), line(&f.sig.ident), false, false);
        }
        visit::visit_item_fn(self, f);
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        let lab =
            matches!(&*i.self_ty, Type::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == "Lab"));
        let was = std::mem::replace(&mut self.in_lab_impl, lab);
        visit::visit_item_impl(self, i);
        self.in_lab_impl = was;
    }

    fn visit_expr_call(&mut self, call: &'ast syn::ExprCall) {
        if let Expr::Path(p) = &*call.func {
            let segments: Vec<&Ident> = p.path.segments.iter().map(|s| &s.ident).collect();
            if let [.., lab, new] = segments.as_slice() {
                if *lab == "Lab" && *new == "new" {
                    self.lab_start(line(lab));
                }
            }
        }
        visit::visit_expr_call(self, call);
    }

    fn visit_item_macro(&mut self, m: &'ast syn::ItemMacro) {
        if !m.mac.path.is_ident("macro_rules") {
            return visit::visit_item_macro(self, m);
        }
        let mut body = MacroBody::default();
        walk_tokens(m.mac.tokens.clone(), &mut body);
        body.lab_starts.into_iter().for_each(|l| self.lab_start(l));
        if let (Some(name), false) = (&m.ident, body.tests.is_empty()) {
            self.test_macros.insert(name.to_string(), body.tests);
        }
    }

    /// Any other macro: the tests written out in it, and those it defines if it is a `macro_rules!`
    /// that defines tests.
    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        let mut body = MacroBody::default();
        walk_tokens(mac.tokens.clone(), &mut body);
        body.lab_starts.into_iter().for_each(|l| self.lab_start(l));
        for (name, gated, line) in body.tests {
            if let Some(name) = name {
                self.push_test(name, line, gated, false);
            }
        }
        let Some(last) = mac.path.segments.last() else {
            return;
        };
        for (name, gated, _) in self
            .test_macros
            .get(&last.ident.to_string())
            .cloned()
            .unwrap_or_default()
        {
            let names = match name {
                Some(fixed) => vec![(fixed, false)],
                None => body.idents.iter().map(|i| (i.clone(), true)).collect(),
            };
            for (name, guessed) in names {
                self.push_test(name, line(&last.ident), gated, guessed);
            }
        }
    }
}

/// Every test of the crate whose root file is `root_file`, following its modules' files, and
/// where the crate starts the lab.
fn scan_crate(root_file: &Path) -> Walker {
    let mut walker = Walker::default();
    walker.visit_module_file(root_file.to_path_buf(), true);
    walker
}

/// The tests that `bad` picks, one a line; empty if none.
fn describe(tests: &[Test], bad: impl Fn(&Test) -> bool) -> String {
    let lines: Vec<String> = tests
        .iter()
        .filter(|t| bad(t))
        .map(|t| format!("\n  {} ({})", t.path, t.at))
        .collect();
    lines.concat()
}

#[test]
fn the_librarys_root_tests_are_gated_and_named_for_the_filter() {
    let tests = scan_crate(&root().join("src/lib.rs")).tests;
    let ungated = describe(&tests, |t| t.path.contains(LAB_FILTER) && !t.gated);
    assert!(
        ungated.is_empty(),
        "tests named `{LAB_FILTER}...` (they need root) that a plain `cargo test` compiles: gate them \
         with #[cfg(feature = \"{FEATURE}\")]:{ungated}"
    );
    let unselected = describe(&tests, |t| t.gated && !t.guessed && !t.path.contains(LAB_FILTER));
    assert!(
        unselected.is_empty(),
        "tests behind the `{FEATURE}` feature without `{LAB_FILTER}` in their path: `make test-lab` \
         (`--lib -- {LAB_FILTER}`) does not run them, and `cargo test` does not compile them:{unselected}"
    );
    // The scan sees the library: its many tests, and the lab ones behind the gate.
    let gated = tests.iter().filter(|t| t.gated).count();
    assert!(tests.len() > 300, "only {} tests found in src/", tests.len());
    assert!(gated >= 10, "only {gated} lab tests found in src/");
}

#[test]
fn the_binary_and_the_crates_have_no_root_tests() {
    let mut roots = vec![root().join("src/main.rs")];
    for entry in std::fs::read_dir(root().join("crates")).expect("crates/") {
        let lib = entry.expect("crates/ entry").path().join("src/lib.rs");
        if lib.is_file() {
            roots.push(lib);
        }
    }
    assert!(roots.len() > 1, "no crate found under crates/");
    for file in roots {
        let lab = describe(&scan_crate(&file).tests, |t| {
            t.gated || t.path.contains(LAB_FILTER)
        });
        assert!(
            lab.is_empty(),
            "lab tests in {}: `make test-lab` runs only the library's and tests/; put them there:{lab}",
            file.display()
        );
    }
}

/// The Makefile's `NAME := ...` line.
fn make_variable(name: &str) -> String {
    let makefile = std::fs::read_to_string(root().join("Makefile")).expect("Makefile");
    let prefix = format!("{name} :=");
    let line = makefile.lines().find(|l| l.starts_with(&prefix));
    line.unwrap_or_else(|| panic!("no `{prefix}` in the Makefile"))[prefix.len()..]
        .trim()
        .to_string()
}

/// The names `make test-lab` passes as `--test`: LAB_TEST_CRATES, its wildcard expanded.
fn make_test_lab_targets() -> BTreeSet<String> {
    let value = make_variable("LAB_TEST_CRATES");
    const WILDCARD: &str = "$(basename $(notdir $(wildcard tests/lab_*.rs)))";
    let others = value.replace(WILDCARD, " ");
    assert!(
        value.contains(WILDCARD),
        "LAB_TEST_CRATES no longer takes every tests/lab_*.rs: {value}"
    );
    assert!(
        !others.contains('$'),
        "LAB_TEST_CRATES has an expression this test cannot read: {value}"
    );
    let mut names: BTreeSet<String> = others.split_whitespace().map(str::to_string).collect();
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
    let packages = metadata["packages"].as_array().expect("packages");
    let agent = packages
        .iter()
        .find(|p| p["name"] == "antrea-vm-agent")
        .expect("the agent's package");
    assert!(
        agent["features"].get(FEATURE).is_some(),
        "Cargo.toml declares no `{FEATURE}` feature"
    );
    let has = |list: &Value, name: &str| list.as_array().is_some_and(|l| l.iter().any(|x| x == name));
    let targets = agent["targets"].as_array().expect("targets").iter();
    let tests = targets.filter(|t| has(&t["kind"], "test")).map(|t| {
        let (name, src) = (
            t["name"].as_str().expect("name"),
            t["src_path"].as_str().expect("src_path"),
        );
        (
            name.to_string(),
            PathBuf::from(src),
            has(&t["required-features"], FEATURE),
        )
    });
    tests.collect()
}

#[test]
fn integration_tests_needing_root_require_the_feature_and_are_in_the_makefile() {
    // `make test` runs the targets that need no root by name: every tests/*.rs but the lab's.
    const UNIT: &str = "$(filter-out $(LAB_TEST_CRATES),$(basename $(notdir $(wildcard tests/*.rs))))";
    let unit = make_variable("UNIT_TEST_CRATES");
    assert_eq!(
        unit, UNIT,
        "UNIT_TEST_CRATES is no longer every tests/*.rs but the lab's"
    );
    let targets = test_targets();
    let make = make_test_lab_targets();
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
        if *requires {
            continue;
        }
        if *src != root().join("tests").join(format!("{name}.rs")) {
            problems.push(format!(
                "{name}: its source is {}, not tests/{name}.rs, so `make test` (UNIT_TEST_CRATES, the \
                 tests/*.rs files) never runs it",
                src.display()
            ));
        }
        // The target's own file and the modules it includes (`mod support;`, `#[path]`).
        let scan = scan_crate(src);
        for t in scan.tests.iter().filter(|t| t.path.contains(LAB_FILTER)) {
            problems.push(format!(
                "{name}: test {} ({}) is named as needing root, but the target does not require `{FEATURE}`",
                t.path, t.at
            ));
        }
        for at in &scan.lab_starts {
            problems.push(format!(
                "{name}: starts the lab (Lab::new, root) at {at} but does not require `{FEATURE}`"
            ));
        }
    }
    for name in &make {
        match targets.iter().find(|(n, _, _)| n == name) {
            None => problems.push(format!("{name}: in LAB_TEST_CRATES but not a test target")),
            Some((_, _, false)) => problems.push(format!(
                "{name}: `make test-lab` runs it but it does not require `{FEATURE}`, so `cargo test` runs it too"
            )),
            Some(_) => {}
        }
    }
    assert!(problems.is_empty(), "the lab split:\n{}", problems.join("\n"));
    let lab_targets = targets.iter().filter(|(_, _, r)| *r).count();
    assert!(
        lab_targets > 1,
        "no integration test requires `{FEATURE}`: {targets:?}"
    );
}

#[test]
fn the_scan_reads_cfgs_macros_and_module_files() {
    let lib = r###"//! #[test] fn lab_in_a_comment() {}
#[cfg(test)] #[cfg(feature = "lab")] mod lab_tests;
mod a;
#[path = "elsewhere/p.rs"] mod by_path;
#[cfg(test)]
mod inline {
    const S: &str = "{ #[test] fn lab_in_a_string() {";
    #[test] fn plain() {}
    #[cfg(all(not(windows), feature = "lab"))]
    mod lab {
        #[tokio::test(flavor = "multi_thread")] async fn lab_in_the_gated_module() {}
        #[test] fn forgot_the_name() {}
    }
    #[test] #[cfg(any(feature = "lab", unix))] fn lab_any_is_no_gate() {}
    #[test] #[cfg(any(feature = "lab", all(unix, feature = "lab")))] fn lab_any_of_gates() {}
    #[cfg(not(feature = "lab"))] #[test] fn lab_not() {}
    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3))]
        #[test] fn in_a_macro(x in 0..3u8) { assert!(x < 3); }
    }
    macro_rules! case { ($name:ident, $v:expr) => { #[test] fn $name() { assert!($v) } }; }
    case!(lab_by_a_macro, 1 < 2);
    #[cfg(feature = "lab")] case!(lab_gated_by_a_macro, 1 < 2);
    mod nested;
}
fn starts() { let _ = Lab::new(); assert!(support::Lab::new().ok()); }
impl Default for Lab { fn default() -> Self { Lab::new() } }
"###;
    let dir = tempfile::tempdir().unwrap();
    let files = [
        ("lib.rs", lib),
        ("lab_tests.rs", "#[test] fn lab_in_a_file() {}"),
        ("a.rs", "mod b;"),
        (
            "a/b.rs",
            "#![cfg(feature = \"lab\")] #[test] fn lab_inner_gate() {}",
        ),
        ("elsewhere/p.rs", "mod q;"),
        ("elsewhere/q.rs", "#[test] fn by_path() {}"),
        ("inline/nested.rs", "\n#[actix_rt::test] async fn deep() {}"),
    ];
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let scan = scan_crate(&dir.path().join("lib.rs"));
    let seen: Vec<String> = scan
        .tests
        .iter()
        .map(|t| format!("{} {} {}", t.path, t.gated, t.guessed))
        .collect();
    let expected = "lab_tests::lab_in_a_file true false
        a::b::lab_inner_gate true false
        by_path::q::by_path false false
        inline::plain false false
        inline::lab::lab_in_the_gated_module true false
        inline::lab::forgot_the_name true false
        inline::lab_any_is_no_gate false false
        inline::lab_any_of_gates true false
        inline::lab_not false false
        inline::in_a_macro false false
        inline::lab_by_a_macro false true
        inline::lab_gated_by_a_macro true true
        inline::nested::deep false false";
    assert_eq!(seen, expected.lines().map(str::trim).collect::<Vec<_>>());
    let at = |file: &str, line: usize| format!("{}:{line}", dir.path().join(file).display());
    assert_eq!(scan.tests[3].at, at("lib.rs", 8));
    assert_eq!(scan.tests[12].at, at("inline/nested.rs", 2));
    // The two calls in `starts`, one inside a macro; not the one that defines the lab.
    assert_eq!(scan.lab_starts, [at("lib.rs", 26), at("lib.rs", 26)]);
}
