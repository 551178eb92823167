//! The fast reader against the YAML library: wherever the fast reader answers, it answers what
//! the library answers (the same values, the same elements spent), on real policy texts, on
//! every short scalar, and on random documents damaged at random.

use std::path::Path;

use proptest::prelude::*;
use serde_json::{json, Value};

use super::{parse_stream, Parsed};
use crate::sources::bounded::parse_yaml_piece_with_library;
use crate::sources::mutations::mutation;

const MAX: usize = 1_000_000;
const DEPTH: usize = 64;

/// Compares both readers on `text` within the limits; `true` when the fast reader answered.
fn agree(text: &str, max_elements: usize, max_depth: usize) -> bool {
    let Some(Parsed { values, elements }) = parse_stream(text, max_elements, max_depth) else {
        return false;
    };
    match parse_yaml_piece_with_library(text, max_elements, max_depth) {
        Ok((library, spent)) => {
            assert_eq!(values, library, "the values of {:?}", clip(text));
            assert_eq!(elements, spent, "the elements of {:?}", clip(text));
        }
        Err(e) => panic!(
            "the fast reader read {:?} as {values:?}; the library refuses it: {e}",
            clip(text)
        ),
    }
    true
}

/// The start of a long text, for messages.
fn clip(text: &str) -> &str {
    &text[..text.len().min(400)]
}

fn fast(text: &str) -> Vec<Value> {
    assert!(agree(text, MAX, DEPTH), "the fast reader reads {text:?}");
    parse_stream(text, MAX, DEPTH).expect("read").values
}

#[test]
fn policy_shapes_are_read_fast_and_the_same() {
    let text = "\
# a comment
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata:
  name: allow-ssh   # trailing comment
  labels: {app.kubernetes.io/name: web, tier: \"1\"}
spec:
  priority: 5
  tier: securityops
  appliedTo:
  - externalEntitySelector:
      matchLabels:
        role: db
  ingress:
    - action: Allow
      from:
        - ipBlock:
            cidr: 10.0.0.0/8
            except: [10.1.0.0/16, '10.2.0.0/16']
        - ipBlock: {cidr: \"fd00::/8\"}
      ports:
        - protocol: TCP
          port: 22
          endPort: 30
      enableLogging: true
      logLabel: null
    -
      action: Drop
  egress: []
  weight: -1.5
  empty:
---
kind: Second
items: [1, 2.5, x y, -3, +4]
";
    let values = fast(text);
    assert_eq!(values.len(), 2);
    assert_eq!(
        values[0]["spec"]["ingress"][0]["from"][1],
        json!({"ipBlock": {"cidr": "fd00::/8"}})
    );
    assert_eq!(values[0]["metadata"]["labels"]["tier"], json!("1"));
    assert_eq!(values[1]["items"], json!([1, 2.5, "x y", -3, 4]));
}

/// Fleet policy `i` as the benches write it, with its priority (whole-number or fractional).
pub(super) fn bench_fleet_policy(i: u32) -> (f64, String) {
    let priority = [1.0, 2.0, 5.5, 1.0 + f64::from(i) * 0.007][i as usize % 4];
    let text = format!(
        "apiVersion: controlplane.antrea.io/v1beta2
kind: NetworkPolicy
metadata: {{name: uid-fleet-{i}, uid: uid-fleet-{i}}}
sourceRef: {{type: AntreaClusterNetworkPolicy, name: fleet-{i}, uid: uid-fleet-{i}}}
appliedToGroups: [atg-vm1]
priority: {priority}
tierPriority: 250
rules:
- {{direction: In, from: {{ipBlocks: [{{cidr: 10.0.{i}.0/24}}, {{cidr: 192.168.0.0/16}}]}}, services: [{{protocol: TCP, port: 22}}, {{protocol: TCP, port: 8000, endPort: 8081}}], action: Allow, priority: 0}}
- {{direction: Out, to: {{ipBlocks: [{{cidr: 10.1.{i}.0/24}}, {{cidr: \"fd00::/8\"}}]}}, services: [{{protocol: TCP, port: 22}}], action: Reject, priority: 1}}
"
    );
    (priority, text)
}

/// Every fleet policy the benches write, both kinds of priority.
#[test]
fn the_bench_fleets_are_read_fast() {
    for i in 0..300 {
        let (priority, text) = bench_fleet_policy(i);
        let values = fast(&text);
        assert_eq!(values[0]["priority"].as_f64(), Some(priority), "{text}");
    }
}

/// The YAML files of the repository and the YAML blocks of its documentation: read the same
/// wherever the fast reader reads them, and most of them read fast.
#[test]
fn the_repositorys_yaml_reads_the_same() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut texts = Vec::new();
    let mut dirs = vec![
        root.join("deploy"),
        root.join("metrics"),
        root.join("tests"),
        root.join("docs"),
    ];
    let mut markdown = vec![root.join("README.md")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a directory").flatten() {
            let path = entry.path();
            let name = path.to_string_lossy().into_owned();
            if path.is_dir() {
                dirs.push(path);
            } else if name.ends_with(".yaml") || name.ends_with(".yml") {
                texts.push(std::fs::read_to_string(&path).expect("text"));
            } else if name.ends_with(".md") {
                markdown.push(path);
            }
        }
    }
    for path in markdown {
        let text = std::fs::read_to_string(&path).expect("text");
        for block in text.split("```yaml\n").skip(1) {
            texts.push(block.split("```").next().unwrap_or_default().to_owned());
        }
    }
    let mut read_fast = 0;
    for text in &texts {
        // Compared whether or not the library accepts it: a fixture the library refuses must
        // not be read fast.
        if agree(text, MAX, DEPTH) {
            read_fast += 1;
        }
    }
    assert!(texts.len() >= 10, "{} texts", texts.len());
    assert!(
        read_fast * 2 >= texts.len(),
        "{read_fast} of {} read fast",
        texts.len()
    );
}

/// Every scalar of up to three characters from the characters that decide a scalar's type, as a
/// value, an item, a flow entry and a key; and the words and numbers that look alike.
#[test]
fn every_short_scalar_is_typed_as_the_library_types_it() {
    let alphabet: Vec<char> = "019.+-eExob_~nNaIifT/: ".chars().collect();
    let mut scalars: Vec<String> = Vec::new();
    for a in &alphabet {
        scalars.push(a.to_string());
        for b in &alphabet {
            scalars.push(format!("{a}{b}"));
            for c in &alphabet {
                scalars.push(format!("{a}{b}{c}"));
            }
        }
    }
    for word in [
        "null",
        "Null",
        "NULL",
        "nULL",
        "true",
        "True",
        "TRUE",
        "tRUE",
        "false",
        "FALSE",
        "yes",
        "No",
        "on",
        "OFF",
        "y",
        "n",
        "inf",
        "-inf",
        ".inf",
        "-.Inf",
        "+.inf",
        ".NaN",
        "nan",
        "NaN",
        "infinity",
        "-Infinity",
        "0x1F",
        "-0x10",
        "0o17",
        "0b101",
        "+0b1",
        "007",
        "-007",
        "+007",
        "0",
        "-0",
        "+0",
        "00",
        "0.0",
        "-0.0",
        "1e3",
        "1E-3",
        "1.5e+3",
        "1_000",
        "12345678901234567890",
        "-9223372036854775809",
        "18446744073709551615",
        "999999999999999999",
        "1e400",
        "-1e400",
        "4.9e-325",
        "1.14",
        "10.0.0.1",
        "10.0.0.0/8",
        "fd00::/8",
        "::1",
        "1.2.3",
        "2001:db8::1",
        "+-1",
        "-+1",
        "--1",
        "++1",
        ". 5",
        "1 2",
        "a b c",
        "http://x",
        "~x",
        "x~",
    ] {
        scalars.push(word.to_owned());
    }
    let mut read_fast = 0;
    for s in &scalars {
        for text in [
            format!("k: {s}\n"),
            format!("- {s}\n"),
            format!("{{k: {s}}}\n"),
            format!("[{s}, x]\n"),
            format!("{s}: v\n"),
            format!("{s}\n"),
            format!("k: \"{s}\"\n"),
            format!("k: '{s}'\n"),
        ] {
            read_fast += usize::from(agree(&text, MAX, DEPTH));
        }
    }
    assert!(
        read_fast > scalars.len() * 3,
        "{read_fast} of {} read fast",
        scalars.len() * 8
    );
    // The common ones are read fast.
    for s in ["5", "-3", "1.14", "Allow", "10.0.0.0/8", "true", "null", "x y"] {
        assert!(agree(&format!("k: {s}\n"), MAX, DEPTH), "{s}");
    }
}

/// Layouts near the edge of the subset: read the same, or left to the library.
#[test]
fn edge_layouts_read_the_same_or_are_left_to_the_library() {
    let texts = [
        "",
        "\n",
        "# only\n",
        "---\n",
        "---\n---\n",
        "a: 1\n---\n",
        "--- # c\na: 1\n",
        "a: 1\n...\n",
        "%YAML 1.2\n---\na: 1\n",
        "a:\n- 1\n- 2\nb: 3\n",
        "a:\n  - 1\n  -\n  - - 2\n    - 3\n",
        "- a: 1\n  b: 2\n- c\n",
        "- a: 1\n   b: 2\n",
        "- a: 1\n b: 2\n",
        "a: 1\n  b: 2\n",
        "a:\n  b\n",
        "a:\n  b\n  c\n",
        "a: b\n  c\n",
        "  a: 1\n  b: 2\n",
        "a: 1\nb:\nc: 3\n",
        "a: 1\na: 2\n",
        "{a: 1, a: 2}\n",
        "a: [1,2]\n",
        "a: [1 ,2 ]\n",
        "a: [1, 2,]\n",
        "a: [1,\n  2]\n",
        "a: {b: 1,c: 2}\n",
        "a: {b:1}\n",
        "a: {\"b\":1}\n",
        "a: {b: }\n",
        "a: {b}\n",
        "a: [b: c]\n",
        "a: 'it''s'\n",
        "a: \"q\\\"q\\\\q\\nq\\tq\"\n",
        "a: \"\\x41\"\n",
        "a: \"open\n",
        "a: 'x' # c\n",
        "a: 'x'#c\n",
        "a: [1] # c\n",
        "a: [1]#c\n",
        "a: x#y\n",
        "a: x #y\n",
        "a: x: y\n",
        "a: x:y\n",
        "a:x\n",
        "a :x\n",
        "a: -\n",
        "a: - b\n",
        "a: &x 1\nb: *x\n",
        "a: !!str 1\n",
        "a: |\n  x\n",
        "a: >\n  x\n",
        "? a\n: b\n",
        "a: @x\n",
        "a: `x`\n",
        "a: x, y\n",
        "a: [x y, z]\n",
        "\"a b\": 1\n",
        "'a': 1\n",
        "a:\tb\n",
        "a: b\r\n",
        "a: é\n",
        "-\n",
        "- \n- x\n",
        "-x\n",
        "- -1\n",
        "- - - x\n",
        "[]\n",
        "{}\n",
        "a: []\nb: {}\n",
        "a:\n\n  b: 1\n\n",
        "a:\n  # c\n  b: 1\n",
        "a: 1\n# c\nb: 2\n",
        "1: a\ntrue: b\nnull: c\n",
        "a: ~\nb: ~x\n",
        "a: --- x\n",
        "a:\n  ---\n",
        "a: ...\n",
        "a: [[1, [2, []]], {b: {c: []}}]\n",
    ];
    for text in texts {
        agree(text, MAX, DEPTH);
        for limit in 0..6 {
            agree(text, limit, DEPTH);
            agree(text, MAX, limit);
        }
    }
    // At the caps: keys around the library's 1,024-character limit, nesting around its 128 levels.
    for len in [990, 999, 1000, 1001, 1022, 1023, 1024, 1025, 1030] {
        let key = "k".repeat(len);
        for text in [
            format!("{key}: 1\n"),
            format!("- {key}: 1\n"),
            format!("\"{key}\": 1\n"),
            format!("a: {{{key}: 1}}\n"),
            format!("a: {{\"{key}\": 1}}\n"),
        ] {
            agree(&text, MAX, DEPTH);
        }
    }
    for depth in [95, 99, 100, 101, 126, 127, 128, 129, 130] {
        let flow = format!("a: {}1{}\n", "[".repeat(depth), "]".repeat(depth));
        let block: String = (0..depth).map(|i| format!("{}k:\n", " ".repeat(i))).collect();
        for text in [flow, format!("{block}{}v\n", " ".repeat(depth))] {
            agree(&text, MAX, 200);
            agree(&text, MAX, depth);
        }
    }
    // Indentless sequences, several documents sharing one budget, escapes, the rarer characters.
    for text in [
        "a:\n- b:\n  - 1\n  - 2\n  c: 3\n- - x\n  - y\n",
        "a: 1\n---\nb: [1, 2]\n---\n- c\n",
        r#"a: "x\"y\\z\tw""#,
        "b: 'it''s ''q'''\n",
        "a: f(x) = y; $z ^w\nb: [f(x) = y; $z ^w]\n",
    ] {
        assert!(agree(text, MAX, DEPTH), "{text:?}");
        for limit in 0..12 {
            agree(text, limit, DEPTH);
        }
    }
    for readable in [
        "a:\n- 1\n- 2\nb: 3\n",
        "- a: 1\n  b: 2\n- c\n",
        "a: 'it''s'\n",
        "---\na: 1\n---\nb: 2\n",
        "- - - x\n",
    ] {
        assert!(agree(readable, MAX, DEPTH), "{readable:?}");
    }
}

/// A random document of the policy files' shapes, written in random styles.
pub(super) fn document() -> impl Strategy<Value = String> {
    let scalar = prop_oneof![
        "[a-zA-Z][a-zA-Z0-9.-]{0,6}",
        "-?[0-9]{1,4}(\\.[0-9]{1,3})?",
        "[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}/[0-9]{1,2}",
        Just("true".to_owned()),
        Just("null".to_owned()),
        Just("~".to_owned()),
        "\"[a-z :#,]{0,5}\"",
        "'[a-z :#,]{0,5}'",
        // Anything: a scalar, an indicator, a quote, a comment.
        "[-+.0-9eExob_~a-zA-Z:/ #,\\[\\]{}'\"!&*|>%@`?]{1,6}",
    ];
    let key = prop_oneof![4 => "[a-z]{1,4}", 1 => "[-+.0-9a-zA-Z_/~ :\"'#]{1,5}"];
    let leaf = scalar.prop_map(|s| (s.clone(), s));
    // Each node as (block text at indent 0, flow text).
    let node = leaf.prop_recursive(4, 40, 5, move |inner| {
        prop_oneof![
            prop::collection::vec((key.clone(), inner.clone()), 0..5).prop_map(|entries| {
                let mut seen = std::collections::BTreeSet::new();
                let entries: Vec<_> = entries
                    .into_iter()
                    .filter(|(k, _)| seen.insert(k.clone()))
                    .collect();
                let block = entries
                    .iter()
                    .map(|(k, (b, _))| {
                        if b.contains('\n') {
                            format!("{k}:\n{}", indent(b))
                        } else {
                            format!("{k}: {b}\n")
                        }
                    })
                    .collect::<String>();
                let flow = format!(
                    "{{{}}}",
                    entries
                        .iter()
                        .map(|(k, (_, f))| format!("{k}: {f}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                (
                    if entries.is_empty() {
                        "{}".to_owned()
                    } else {
                        block
                    },
                    flow,
                )
            }),
            prop::collection::vec(inner, 0..5).prop_map(|items| {
                let block = items
                    .iter()
                    .map(|(b, _)| {
                        let mut lines = b.lines();
                        let first = lines.next().unwrap_or_default();
                        let rest: String = lines.map(|l| format!("  {l}\n")).collect();
                        format!("- {first}\n{rest}")
                    })
                    .collect::<String>();
                let flow = format!(
                    "[{}]",
                    items
                        .iter()
                        .map(|(_, f)| f.clone())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                (if items.is_empty() { "[]".to_owned() } else { block }, flow)
            }),
        ]
    });
    let decoration = prop_oneof![
        Just(""),
        Just(" # note"),
        Just("\n# line"),
        Just("\n"),
        Just("  ")
    ];
    (
        node,
        any::<bool>(),
        prop::collection::vec((any::<u16>(), decoration), 0..3),
        any::<bool>(),
    )
        .prop_map(|((block, flow), as_flow, decorations, wide)| {
            let root = if as_flow { flow } else { block };
            let mut lines: Vec<String> = root.lines().map(str::to_owned).collect();
            // Comments, blank lines and trailing spaces at random lines; maybe every indentation
            // doubled.
            for (at, text) in decorations {
                let i = usize::from(at) % lines.len().max(1);
                if let Some(line) = lines.get_mut(i) {
                    line.push_str(text);
                }
            }
            if wide {
                for line in &mut lines {
                    let spaces = line.len() - line.trim_start_matches(' ').len();
                    line.insert_str(0, &" ".repeat(spaces));
                }
            }
            lines.iter().map(|l| format!("{l}\n")).collect::<String>()
        })
}

fn indent(block: &str) -> String {
    block.lines().map(|l| format!("  {l}\n")).collect()
}

proptest! {
    // 2,000 cases in the suite; PROPTEST_CASES asks for a longer search.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(2000),
        ..ProptestConfig::default()
    })]

    /// Random documents: read the same, whether whole or damaged.
    #[test]
    fn random_documents_read_the_same(doc in document(), edits in prop::collection::vec(mutation(), 0..3), limit in 0usize..40) {
        agree(&doc, MAX, DEPTH);
        agree(&doc, limit, DEPTH);
        agree(&doc, MAX, limit % 6);
        let mut damaged = doc.clone();
        for edit in &edits {
            damaged = edit.apply(&damaged);
        }
        if damaged.len() < 200_000 {
            agree(&damaged, MAX, DEPTH);
            agree(&damaged, limit, DEPTH);
        }
    }
}

/// Undamaged random documents are read fast more often than not (the comparison above is not
/// vacuous).
#[test]
fn random_documents_are_mostly_read_fast() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let mut read_fast = 0;
    for _ in 0..500 {
        let doc = document().new_tree(&mut runner).expect("a document").current();
        read_fast += usize::from(agree(&doc, MAX, DEPTH));
    }
    assert!(read_fast >= 250, "{read_fast} of 500");
}
