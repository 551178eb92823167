//! Rule 10 of docs/architecture.md: the emulator and the fakes are test support, and the agent
//! does not link them; and the policy core's purity. Four checks, all cheap (no compilation, no
//! network):
//!
//! 1. **The emulator is a crate the agent's build does not reach.** `antrea-api-emulator`
//!    (crates/api-emulator) is a dev-dependency of the agent and nothing else: `cargo tree
//!    --frozen` on the agent's normal and build edges (what `cargo build` and `make deb` compile)
//!    does not list it, while the same query with the dev edges does, so the first answer is not
//!    a blind spot; `cargo metadata` says no workspace package depends on it otherwise, and the
//!    agent's package has one binary, the agent's own.
//! 2. **The fakes' feature is off in the agent's build.** The fakes of every edge sit behind the
//!    `test-util` feature. `cargo tree` resolves features exactly as `cargo build` would and
//!    shows that the package's normal build has no feature on, while the tests' build has
//!    `test-util`; `cargo metadata` then says only the self dev-dependency enables it and no
//!    feature pulls it in.
//! 3. **The code is behind the feature.** The sources are read: after leaving out comments, the
//!    items gated `#[cfg(test)]` or `#[cfg(any(test, feature = "test-util"))]` and the files such
//!    gated `mod` declarations bring in, no product file of `src/` may declare or name a fake
//!    (`mod fake…`, `fake…::`, `Fake…`) or the emulator. Together with the first two this means
//!    the library the agent's binary links is compiled without any of them.
//!
//! 4. **The policy core stays pure.** `antrea-policy` (crates/policy) reaches no actix, kube,
//!    tokio, rustls, hyper, netlink or nix along its normal edges.
//!
//! What this does not do is inspect a built agent binary: under `cargo test` the library is
//! compiled with `test-util` (the dev-dependency unifies features), so the binary next to the
//! tests is not the product one. The product build itself is compiled and run by `make demo`,
//! packaged by `make deb`, and checked by `make lint` (`clippy --lib --bins` without the feature).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

#[path = "support/source_scan.rs"]
mod source_scan;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use source_scan::{child_paths, product_lines, rust_files};

const PACKAGE: &str = "antrea-vm-agent";
const FEATURE: &str = "test-util";
const EMULATOR: &str = "antrea-api-emulator";
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

/// The workspace's packages as `cargo metadata` describes them.
fn workspace_packages() -> Vec<Value> {
    let metadata: Value = serde_json::from_str(&cargo(&["metadata", "--no-deps", "--format-version", "1"]))
        .expect("cargo metadata's JSON");
    metadata["packages"].as_array().expect("packages").clone()
}

/// Every dependency on `name` in the workspace: the package that declares it, and the
/// dependency's entry (its `kind`, its `features`).
fn dependencies_on<'a>(packages: &'a [Value], name: &'a str) -> impl Iterator<Item = (&'a Value, &'a Value)> {
    packages.iter().flat_map(move |package| {
        package["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .filter(move |dep| dep["name"] == name)
            .map(move |dep| (package, dep))
    })
}

#[test]
fn only_a_dev_dependency_enables_test_util() {
    let packages = workspace_packages();
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
    for (package, dep) in dependencies_on(&packages, PACKAGE) {
        let wants_feature = dep["features"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == FEATURE));
        if !wants_feature {
            continue;
        }
        asking += 1;
        assert_eq!(
            dep["kind"], "dev",
            "{} depends on {PACKAGE} with {FEATURE} as a {} dependency",
            package["name"], dep["kind"]
        );
    }
    assert_eq!(
        asking, 1,
        "expected exactly the self dev-dependency to ask for {FEATURE}"
    );

    // The agent's package builds one binary, its own, and it needs no feature.
    let bins: Vec<&Value> = agent["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .filter(|t| t["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "bin")))
        .collect();
    let names: Vec<&str> = bins.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, vec![PACKAGE], "the agent's package builds other binaries");
    assert!(
        bins[0]["required-features"]
            .as_array()
            .is_none_or(|f| f.is_empty()),
        "the agent's binary requires features"
    );
}

/// The packages `cargo tree` lists for the agent along the given edges, one name per line.
fn packages_along(edges: &str) -> Vec<String> {
    packages_of(PACKAGE, edges)
}

/// The packages `cargo tree` lists for `package` along the given edges, one name per line.
fn packages_of(package: &str, edges: &str) -> Vec<String> {
    let out = cargo(&[
        "tree", "-p", package, "-e", edges, "--prefix", "none", "-f", "{p}",
    ]);
    out.lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_emulator_is_only_a_dev_dependency() {
    let product = packages_along("normal,build");
    assert!(
        product.iter().any(|p| p == "ovs-openflow") && product.iter().any(|p| p == "antrea-controlplane"),
        "the agent's normal graph lacks its own crates: {product:?}"
    );
    assert!(
        !product.iter().any(|p| p == EMULATOR),
        "the agent's normal build reaches {EMULATOR}"
    );
    let tests = packages_along("normal,build,dev");
    assert!(
        tests.iter().any(|p| p == EMULATOR),
        "the tests' build should reach {EMULATOR} through the dev-dependency"
    );

    // No package of the workspace depends on the emulator other than as a dev-dependency.
    let packages = workspace_packages();
    let mut dependents = Vec::new();
    for (package, dep) in dependencies_on(&packages, EMULATOR) {
        dependents.push(package["name"].as_str().unwrap_or("?").to_string());
        assert_eq!(
            dep["kind"], "dev",
            "{} depends on {EMULATOR} as a {} dependency",
            package["name"], dep["kind"]
        );
    }
    assert_eq!(
        dependents,
        vec![PACKAGE.to_string()],
        "the packages using {EMULATOR}"
    );
}

/// The pure policy core (crates/policy) reaches no async runtime, actor system, Kubernetes client,
/// TLS or system-call crate: what keeps it pure is its dependency list, checked here.
#[test]
fn the_policy_core_reaches_no_runtime_and_no_system_crate() {
    let packages = packages_of("antrea-policy", "normal,build");
    assert!(
        packages.iter().any(|p| p == "ovs-openflow"),
        "the policy core's graph: {packages:?}"
    );
    let forbidden: Vec<&String> = packages
        .iter()
        .filter(|p| {
            [
                "actix",
                "kube",
                "k8s-openapi",
                "tokio",
                "rustls",
                "hyper",
                "mio",
                "netlink",
                "rtnetlink",
                "nix",
            ]
            .iter()
            .any(|f| p.as_str() == *f || p.starts_with(&format!("{f}-")))
        })
        .collect();
    assert!(forbidden.is_empty(), "the policy core reaches {forbidden:?}");
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
    fake_type
        || fake_module
        || words
            .iter()
            .any(|w| *w == "emulator" || *w == "antrea_api_emulator")
}

#[test]
fn no_product_code_declares_or_names_a_fake_or_the_emulator() {
    let src = root().join("src");
    // The emulator is a crate of its own now (crates/api-emulator, checked above).
    for gone in ["emulator", "bin/antrea-api-emulator.rs"] {
        assert!(
            !src.join(gone).exists(),
            "src/{gone} is back: the emulator lives in crates/api-emulator"
        );
    }
    let mut gated: Vec<PathBuf> = Vec::new();
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
                pub fn faked_out() -> Fakery {}\n\
                use antrea_api_emulator::Emulator;\n";
    let mut gated_mods = Vec::new();
    let flagged: Vec<usize> = product_lines(text, GATES, &mut gated_mods)
        .into_iter()
        .filter(|(_, l)| names_test_support(l))
        .map(|(n, _)| n)
        .collect();
    assert_eq!(flagged, vec![1, 10, 16]);
    assert_eq!(gated_mods, vec!["fake".to_string()]);
}
