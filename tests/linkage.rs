//! Rule 10 of docs/architecture.md: the emulator and the fakes are test support, and the agent
//! does not link them. Two halves, both cheap (no compilation, no network):
//!
//! 1. **The feature is off in the agent's build.** Everything test-only sits behind the
//!    `test-util` feature. `cargo tree --frozen` resolves features exactly as `cargo build` would
//!    and shows that the package's normal build (normal and build edges, no dev-dependencies)
//!    has no feature on, while with the dev-dependencies (what `cargo test` and the benches
//!    build) `test-util` is on: the same command sees the feature when it is there, so the first
//!    answer is not a blind spot. `cargo metadata` then says where the feature can come from: only
//!    a dev-dependency enables it, no default or other feature pulls it in, and the
//!    `antrea-api-emulator` binary requires it (so a plain `cargo build` or `make deb` skips it).
//! 2. **The code is behind the feature.** The sources are read: after leaving out comments, the
//!    items gated `#[cfg(test)]` or `#[cfg(any(test, feature = "test-util"))]` and the files such
//!    gated `mod` declarations bring in, no product file of `src/` may declare or name a fake
//!    (`mod fake…`, `fake…::`, `Fake…`) or the emulator. Together with half 1 this means the
//!    library the agent's binary links is compiled without any of them.
//!
//! What this does not do is inspect a built agent binary: under `cargo test` the library is
//! compiled with `test-util` (the dev-dependency unifies features), so the binary next to the
//! tests is not the product one. The product build itself is compiled by `make deb`
//! (tests/deb_package.rs) and checked by `make lint` (`clippy --lib --bins` without the feature).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

#[path = "support/source_scan.rs"]
mod source_scan;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use source_scan::{child_paths, product_lines, rust_files};

const PACKAGE: &str = "antrea-vm-agent";
const FEATURE: &str = "test-util";
/// The attributes that keep an item out of the agent's build.
const GATES: &[&str] = &["#[cfg(test)]", "#[cfg(any(test, feature = \"test-util\"))]"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs cargo (the one running the tests, when known) in the package's directory, offline and
/// with the lock file as it is.
fn cargo(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(&cargo)
        .args(args)
        .arg("--frozen")
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("running {cargo} {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{cargo} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("cargo's output is UTF-8")
}

/// The features `cargo tree` resolves for the package itself along the given edges.
fn features_along(edges: &str) -> Vec<String> {
    let out = cargo(&[
        "tree", "-p", PACKAGE, "-e", edges, "--depth", "0", "-f", "{p}|{f}",
    ]);
    let line = out
        .lines()
        .find(|l| l.starts_with(PACKAGE))
        .unwrap_or_else(|| panic!("cargo tree printed no line for {PACKAGE}:\n{out}"));
    let (_, features) = line.split_once('|').expect("the {p}|{f} format");
    features
        .split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_agents_build_resolves_without_test_util() {
    let product = features_along("normal,build");
    assert!(
        !product.iter().any(|f| f == FEATURE),
        "the agent's normal build enables {FEATURE}: features {product:?}"
    );
    // The same question with the dev-dependencies: the tests' build does have it, so the answer
    // above comes from the resolution and not from a query that cannot see the feature.
    let tests = features_along("normal,build,dev");
    assert!(
        tests.iter().any(|f| f == FEATURE),
        "the tests' build should enable {FEATURE} through the dev-dependency: features {tests:?}"
    );
}

#[test]
fn only_a_dev_dependency_enables_test_util() {
    let metadata: Value = serde_json::from_str(&cargo(&["metadata", "--no-deps", "--format-version", "1"]))
        .expect("cargo metadata's JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let agent = packages
        .iter()
        .find(|p| p["name"] == PACKAGE)
        .expect("the agent's package");

    // The package's own features: test-util enables nothing, nothing enables test-util.
    let features = agent["features"].as_object().expect("features");
    assert!(
        features.contains_key(FEATURE),
        "Cargo.toml declares no {FEATURE} feature: {features:?}"
    );
    for (name, enables) in features {
        let enables: Vec<&str> = enables
            .as_array()
            .expect("a feature's list")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(
            !enables
                .iter()
                .any(|e| e.trim_start_matches("dep:").contains(FEATURE)),
            "feature {name} enables {FEATURE} (it would reach the agent's build): {enables:?}"
        );
    }

    // Every dependency on the agent that asks for the feature, in every package of the
    // workspace, is a dev-dependency.
    let mut asking = 0;
    for package in packages {
        for dep in package["dependencies"].as_array().expect("dependencies") {
            let wants_feature = dep["features"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f == FEATURE));
            if dep["name"] != PACKAGE || !wants_feature {
                continue;
            }
            asking += 1;
            assert_eq!(
                dep["kind"], "dev",
                "{} depends on {PACKAGE} with {FEATURE} as a {} dependency",
                package["name"], dep["kind"]
            );
        }
    }
    assert_eq!(
        asking, 1,
        "expected exactly the self dev-dependency to ask for {FEATURE}"
    );

    // The binaries: the emulator's needs the feature, the agent's does not.
    let bins: Vec<&Value> = agent["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .filter(|t| t["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "bin")))
        .collect();
    let required = |name: &str| -> Vec<String> {
        let bin = bins
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no binary {name} in Cargo.toml"));
        bin["required-features"]
            .as_array()
            .map(|f| f.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default()
    };
    assert_eq!(required("antrea-api-emulator"), vec![FEATURE.to_string()]);
    assert!(
        required(PACKAGE).is_empty(),
        "the agent's binary requires features"
    );
}

/// Whether a line of product code declares or names test support.
fn names_test_support(line: &str) -> bool {
    let words: Vec<&str> = line
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    let fake_type = words.iter().any(|w| {
        w.strip_prefix("Fake")
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_uppercase()))
    });
    let fake_module = words.iter().any(|w| w.starts_with("fake"))
        && (line.contains("mod fake") || line.contains("fake::") || line.contains("fake_api"));
    fake_type || fake_module || words.contains(&"emulator")
}

#[test]
fn no_product_code_declares_or_names_a_fake_or_the_emulator() {
    let src = root().join("src");
    // The emulator's binary is test support itself (required-features, checked above).
    let test_support_bin = src.join("bin/antrea-api-emulator.rs");
    let mut gated: Vec<PathBuf> = vec![test_support_bin];
    let mut products = Vec::new();
    for file in rust_files(&src) {
        let text = std::fs::read_to_string(&file).expect("source file");
        let mut gated_mods = Vec::new();
        let lines = product_lines(&text, GATES, &mut gated_mods);
        for name in gated_mods {
            gated.extend(child_paths(&file, &name));
        }
        products.push((file, lines));
    }
    let mut found = Vec::new();
    let mut scanned = 0;
    for (file, lines) in &products {
        if gated.iter().any(|g| file.starts_with(g)) {
            continue;
        }
        scanned += 1;
        for (n, line) in lines {
            if names_test_support(line) {
                let shown = file.strip_prefix(root()).unwrap_or(file);
                found.push(format!("{}:{n}: {}", shown.display(), line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "test support outside #[cfg(test)] / #[cfg(any(test, feature = \"test-util\"))]:\n{}",
        found.join("\n")
    );
    // The gated modules are the ones rule 10 names, so the scan did skip them and not miss them.
    for module in [
        "emulator",
        "host/fake.rs",
        "ovs/openflow/fake.rs",
        "ovs/ovsdb/fake.rs",
        "k8s/fake_api.rs",
        "sources/fake.rs",
    ] {
        let path = src.join(module);
        assert!(path.exists(), "{} is gone: update this test", path.display());
        assert!(
            gated.contains(&path),
            "{} is not behind a test gate",
            path.display()
        );
    }
    assert!(scanned > 50, "only {scanned} product files scanned");
}

#[test]
fn the_scan_sees_ungated_test_support_and_skips_gated_items() {
    let text = "pub mod emulator;\n\
                #[cfg(any(test, feature = \"test-util\"))]\n\
                pub mod fake;\n\
                // FakeHost in a comment\n\
                #[cfg(any(test, feature = \"test-util\"))]\n\
                #[derive(Default)]\n\
                pub struct FakeCache {\n    calls: Vec<u8>,\n}\n\
                use crate::host::fake::FakeHost;\n\
                #[cfg(test)]\n\
                mod tests {\n    use crate::k8s::fake_api::FakeApi;\n}\n\
                pub fn faked_out() -> Fakery {}\n";
    let mut gated_mods = Vec::new();
    let flagged: Vec<usize> = product_lines(text, GATES, &mut gated_mods)
        .into_iter()
        .filter(|(_, l)| names_test_support(l))
        .map(|(n, _)| n)
        .collect();
    assert_eq!(flagged, vec![1, 10]);
    assert_eq!(gated_mods, vec!["fake".to_string()]);
}
