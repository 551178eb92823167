//! The operators' assets under `metrics/` checked against the agent: the Grafana dashboard's
//! structure (panels, targets, datasource variables), the alert rules' structure, the scrape
//! configuration, and every PromQL expression in them. Expressions go through a small PromQL
//! checker (balanced brackets, known functions, label matchers, durations) whose metric and label
//! names must be ones the agent exports: they are read from `src/api/` and `src/telemetry.rs` (a `METRIC_NAMES` list
//! when there is one, else the metric-name string literals there), so a renamed or removed metric
//! fails here. When `promtool` is available (on PATH or `$PROMTOOL`), it checks the rules, the
//! dashboard's expressions and the scrape configuration too.
//!
//! Also the deploy assets' layout and the agent log's single rotation owner: the real `logrotate`,
//! with every /etc/logrotate.d file the package or the installer ships, leaves the agent's log and
//! its own backups alone (the agent rotates them, as klog does for the Go agent).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as Json;
use serde_norway::Value as Yaml;

#[path = "support/exported_metrics.rs"]
mod exported_metrics;

use exported_metrics::{exported, Exported};

use antrea_vm_agent::cli::klog::RotatingFile;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// A PromQL checker: not a full parser, but it rejects what goes wrong in practice (a typo in a
// function or metric name, an unbalanced bracket, a malformed matcher or duration, an aggregation
// clause without its label list) and collects the names used.

const FUNCTIONS: &[&str] = &[
    "abs",
    "absent",
    "absent_over_time",
    "avg_over_time",
    "ceil",
    "changes",
    "clamp",
    "clamp_max",
    "clamp_min",
    "count_over_time",
    "day_of_month",
    "day_of_week",
    "days_in_month",
    "delta",
    "deriv",
    "exp",
    "floor",
    "histogram_quantile",
    "holt_winters",
    "hour",
    "idelta",
    "increase",
    "irate",
    "label_join",
    "label_replace",
    "last_over_time",
    "ln",
    "log10",
    "log2",
    "max_over_time",
    "min_over_time",
    "minute",
    "month",
    "predict_linear",
    "present_over_time",
    "quantile_over_time",
    "rate",
    "resets",
    "round",
    "scalar",
    "sgn",
    "sort",
    "sort_desc",
    "sqrt",
    "stddev_over_time",
    "stdvar_over_time",
    "sum_over_time",
    "time",
    "timestamp",
    "vector",
    "year",
];
const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];
const GROUPING: &[&str] = &["by", "without", "on", "ignoring", "group_left", "group_right"];
const KEYWORDS: &[&str] = &["and", "or", "unless", "bool", "offset"];

#[derive(Debug, Default)]
struct PromqlNames {
    metrics: BTreeSet<String>,
    labels: BTreeSet<String>,
}

fn check_promql(expr: &str) -> Result<PromqlNames, String> {
    let mut names = PromqlNames::default();
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    let mut stack: Vec<char> = Vec::new();
    let ident_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let skip_ws = |i: &mut usize| {
        while *i < chars.len() && chars[*i].is_whitespace() {
            *i += 1;
        }
    };
    let read_ident = |i: &mut usize| {
        let start = *i;
        while *i < chars.len() && ident_char(chars[*i]) {
            *i += 1;
        }
        chars[start..*i].iter().collect::<String>()
    };
    let read_string = |i: &mut usize| -> Result<String, String> {
        let quote = chars[*i];
        *i += 1;
        let mut s = String::new();
        while *i < chars.len() && chars[*i] != quote {
            if chars[*i] == '\\' {
                *i += 1;
            }
            if let Some(c) = chars.get(*i) {
                s.push(*c);
            }
            *i += 1;
        }
        if *i >= chars.len() {
            return Err("unterminated string".into());
        }
        *i += 1;
        Ok(s)
    };
    // Label list after by/without/on/ignoring/group_*: `(a, b)`.
    let read_label_list = |i: &mut usize, names: &mut PromqlNames, optional: bool| -> Result<(), String> {
        skip_ws(i);
        if chars.get(*i) != Some(&'(') {
            return if optional {
                Ok(())
            } else {
                Err("grouping without its label list".into())
            };
        }
        *i += 1;
        loop {
            skip_ws(i);
            match chars.get(*i) {
                Some(')') => {
                    *i += 1;
                    return Ok(());
                }
                Some(c) if c.is_ascii_alphabetic() || *c == '_' => {
                    let l = read_ident(i);
                    names.labels.insert(l);
                    skip_ws(i);
                    match chars.get(*i) {
                        Some(',') => *i += 1,
                        Some(')') => {}
                        other => return Err(format!("unexpected {other:?} in a label list")),
                    }
                }
                other => return Err(format!("unexpected {other:?} in a label list")),
            }
        }
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            '(' => {
                stack.push(')');
                i += 1;
            }
            ')' | ']' => {
                if stack.pop() != Some(c) {
                    return Err(format!("unbalanced {c:?} at {i}"));
                }
                i += 1;
            }
            '}' => return Err(format!("unexpected '}}' at {i}")),
            ',' => {
                if stack.last() != Some(&')') {
                    return Err(format!("',' outside of a call at {i}"));
                }
                i += 1;
            }
            '{' => {
                // Label matchers: name op "value", ...
                i += 1;
                loop {
                    skip_ws(&mut i);
                    match chars.get(i) {
                        Some('}') => {
                            i += 1;
                            break;
                        }
                        Some(c) if c.is_ascii_alphabetic() || *c == '_' => {
                            let label = read_ident(&mut i);
                            skip_ws(&mut i);
                            let op: String = chars[i..].iter().take(2).collect();
                            let len = if op == "=~" || op == "!~" || op == "!=" {
                                2
                            } else if op.starts_with('=') {
                                1
                            } else {
                                return Err(format!("label {label}: expected a matcher operator at {i}"));
                            };
                            i += len;
                            skip_ws(&mut i);
                            if !matches!(chars.get(i), Some('"') | Some('\'')) {
                                return Err(format!("label {label}: expected a quoted value at {i}"));
                            }
                            let value = read_string(&mut i)?;
                            if op == "=~" || op == "!~" {
                                // Balanced regex groups, at least.
                                let open = value.matches('(').count();
                                if open != value.matches(')').count() {
                                    return Err(format!("label {label}: unbalanced regex {value:?}"));
                                }
                            }
                            names.labels.insert(label);
                            skip_ws(&mut i);
                            match chars.get(i) {
                                Some(',') => i += 1,
                                Some('}') => {}
                                other => return Err(format!("unexpected {other:?} in label matchers")),
                            }
                        }
                        other => return Err(format!("unexpected {other:?} in label matchers at {i}")),
                    }
                }
            }
            '[' => {
                // A range or subquery: duration[:duration].
                i += 1;
                let start = i;
                while i < chars.len() && chars[i] != ']' {
                    i += 1;
                }
                if i >= chars.len() {
                    return Err("unterminated range".into());
                }
                let inside: String = chars[start..i].iter().collect();
                for part in inside.split(':') {
                    // A subquery's step is optional: `[1h:]`.
                    let optional_step = part.is_empty() && inside.contains(':');
                    if !(optional_step || is_duration(part.trim())) {
                        return Err(format!("bad duration {part:?} in [{inside}]"));
                    }
                }
                i += 1;
            }
            '"' | '\'' => {
                read_string(&mut i)?;
            }
            c if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit())) => {
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let word = read_ident(&mut i);
                let mut j = i;
                skip_ws(&mut j);
                let call = chars.get(j) == Some(&'(');
                if AGGREGATIONS.contains(&word.as_str()) {
                    // sum by (x) (...), or sum (...) by (x).
                    let mut k = i;
                    skip_ws(&mut k);
                    let rest: String = chars[k..].iter().collect();
                    if rest.starts_with("by") || rest.starts_with("without") {
                        i = k;
                        read_ident(&mut i);
                        read_label_list(&mut i, &mut names, false)?;
                    } else if !call {
                        return Err(format!("aggregation {word} without arguments"));
                    }
                } else if GROUPING.contains(&word.as_str()) {
                    let optional = word.starts_with("group_");
                    read_label_list(&mut i, &mut names, optional)?;
                } else if KEYWORDS.contains(&word.as_str()) {
                    if word == "offset" {
                        skip_ws(&mut i);
                        let start = i;
                        while i < chars.len() && chars[i].is_ascii_alphanumeric() {
                            i += 1;
                        }
                        let d: String = chars[start..i].iter().collect();
                        if !is_duration(&d) {
                            return Err(format!("bad offset {d:?}"));
                        }
                    }
                } else if call {
                    if !FUNCTIONS.contains(&word.as_str()) {
                        return Err(format!("unknown function {word}"));
                    }
                } else if word == "inf" || word == "nan" || word == "Inf" || word == "NaN" {
                } else {
                    names.metrics.insert(word);
                }
            }
            '+' | '-' | '*' | '/' | '%' | '^' => i += 1,
            '=' | '!' | '<' | '>' => {
                let two: String = chars[i..].iter().take(2).collect();
                i += if ["==", "!=", "<=", ">="].contains(&two.as_str()) {
                    2
                } else if c == '<' || c == '>' {
                    1
                } else {
                    return Err(format!("bad operator at {i}"));
                };
            }
            other => return Err(format!("unexpected {other:?} at {i}")),
        }
    }
    if !stack.is_empty() {
        return Err("unbalanced parentheses".into());
    }
    if names.metrics.is_empty() && !expr.contains("vector(") && !expr.contains("time(") {
        return Err("no metric selected".into());
    }
    Ok(names)
}

fn is_duration(s: &str) -> bool {
    // One or more <number><unit> parts: 5m, 1h30m, 100ms.
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let unit = ["ms", "s", "m", "h", "d", "w", "y"]
            .into_iter()
            .find(|u| rest.starts_with(u));
        match unit {
            Some(u) => rest = &rest[u.len()..],
            None => return false,
        }
    }
    true
}

/// Checks an expression and that every metric and label it uses is exported by the agent.
fn check_against_agent(expr: &str, exported: &Exported, known_extra: &[&str]) -> Result<PromqlNames, String> {
    let names = check_promql(expr)?;
    for m in &names.metrics {
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| m.strip_suffix(s).filter(|b| exported.metrics.contains(*b)));
        if !exported.metrics.contains(m) && base.is_none() && !known_extra.contains(&m.as_str()) {
            return Err(format!(
                "metric {m} is not exported by the agent (src/api, src/telemetry.rs)"
            ));
        }
    }
    for l in &names.labels {
        if !exported.labels.contains(l) {
            return Err(format!(
                "label {l} is not produced by the agent (src/api, src/telemetry.rs) nor by Prometheus"
            ));
        }
    }
    Ok(names)
}

/// Grafana's variables replaced by values PromQL accepts.
fn substitute_grafana(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m")
        .replace("$__interval", "1m")
        .replace("$__range", "1h")
        .replace("${job}", ".*")
        .replace("$job", ".*")
        .replace("${instance}", ".*")
        .replace("$instance", ".*")
}

fn promtool() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PROMTOOL") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("promtool"))
        .find(|p| p.is_file())
}

fn run_promtool(args: &[&std::ffi::OsStr]) {
    let Some(tool) = promtool() else {
        eprintln!(
            "promtool not found (Debian package prometheus): checked with the built-in PromQL checker only"
        );
        return;
    };
    let out = Command::new(&tool).args(args).output().expect("run promtool");
    assert!(
        out.status.success(),
        "promtool {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------------------------
// The checker itself.

#[test]
fn the_promql_checker_accepts_valid_and_rejects_broken_expressions() {
    let exported = Exported {
        metrics: ["antrea_x_total", "antrea_h_seconds"].map(String::from).into(),
        labels: ["job", "instance", "le", "actor"].map(String::from).into(),
    };
    for good in [
        r#"sum by (instance, actor) (increase(antrea_x_total{job=~"a.*", actor!="b"}[5m])) > 3"#,
        r#"histogram_quantile(0.99, sum by (le) (rate(antrea_h_seconds_bucket[1h30m])))"#,
        r#"sum(rate(antrea_h_seconds_sum[5m])) / sum(rate(antrea_h_seconds_count[5m]))"#,
        r#"count(up{job="x"} == 0) or vector(0)"#,
        r#"max(antrea_x_total) without (actor) offset 5m"#,
        r#"topk(5, antrea_x_total)"#,
    ] {
        check_against_agent(good, &exported, &["up"]).unwrap_or_else(|e| panic!("{good}: {e}"));
    }
    for (bad, why) in [
        ("sum(rate(antrea_x_total[5m])", "unbalanced"),
        ("rat(antrea_x_total[5m])", "unknown function rat"),
        ("antrea_x_totl", "metric antrea_x_totl is not exported"),
        (r#"antrea_x_total{actor="a"]"#, "unexpected"),
        (r#"antrea_x_total{actor=a}"#, "quoted value"),
        (r#"antrea_x_total{actorr="a"}"#, "label actorr"),
        ("rate(antrea_x_total[5q])", "bad duration"),
        ("sum by antrea_x_total", "label list"),
        (r#"antrea_x_total{actor=~"(a"}"#, "unbalanced regex"),
        (r#"antrea_x_total{actor="a}"#, "unterminated"),
    ] {
        let err = check_against_agent(bad, &exported, &["up"]).expect_err(bad);
        assert!(err.contains(why), "{bad}: got {err:?}, expected {why:?}");
    }
}

#[test]
fn the_agent_metric_list_is_found() {
    let exported = exported();
    for m in [
        "antrea_agent_ovs_flow_ops_count",
        "antrea_vm_agent_realization_latency_seconds",
        "antrea_vm_agent_actor_restarts_total",
    ] {
        assert!(
            exported.metrics.contains(m),
            "{m} not found in src/api or src/telemetry.rs: {:?}",
            exported.metrics
        );
    }
    assert!(exported.labels.contains("operation") && exported.labels.contains("actor"));
}

// ---------------------------------------------------------------------------------------------
// The dashboard.

const PANEL_TYPES: &[&str] = &[
    "row",
    "timeseries",
    "stat",
    "gauge",
    "table",
    "state-timeline",
    "status-history",
    "bargauge",
    "heatmap",
    "text",
];

#[test]
fn dashboard_structure_and_every_query_match_the_agent() {
    let exported = exported();
    let dash: Json =
        serde_json::from_str(&read("metrics/grafana-dashboard.json")).expect("dashboard is JSON");
    for key in ["title", "uid"] {
        assert!(
            dash[key].as_str().is_some_and(|s| !s.is_empty()),
            "dashboard {key}"
        );
    }
    assert!(
        dash["schemaVersion"].as_u64().is_some_and(|v| v >= 30),
        "schemaVersion"
    );

    // Variables: a Prometheus datasource variable, and job/instance queries through it.
    let vars = dash["templating"]["list"].as_array().expect("templating.list");
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("variable {name}"))
    };
    let ds = var("datasource");
    assert_eq!(ds["type"], "datasource");
    assert_eq!(ds["query"], "prometheus");
    let mut defined: BTreeSet<String> = vars
        .iter()
        .filter_map(|v| v["name"].as_str().map(String::from))
        .collect();
    defined.extend(["__rate_interval", "__interval", "__range"].map(String::from));
    for name in ["job", "instance"] {
        let v = var(name);
        assert_eq!(v["type"], "query");
        assert_eq!(
            v["datasource"]["uid"], "${datasource}",
            "{name} uses the datasource variable"
        );
        let q = v["query"]["query"].as_str().expect("variable query");
        let inner = q
            .strip_prefix("label_values(")
            .and_then(|s| s.strip_suffix(&format!(", {name})")))
            .unwrap_or_else(|| panic!("{name}: label_values(<selector>, {name}) expected, got {q}"));
        check_against_agent(&substitute_grafana(inner), &exported, &[])
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }

    // Panels: unique ids, known types, the datasource variable, inside the 24-column grid, not
    // overlapping, each with targets that have unique refIds and valid expressions.
    let panels = dash["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    let mut cells: BTreeMap<(u64, u64), String> = BTreeMap::new();
    let mut used_metrics = BTreeSet::new();
    let mut exprs = Vec::new();
    for p in panels {
        let title = p["title"].as_str().expect("panel title").to_string();
        assert!(!title.is_empty());
        assert!(
            ids.insert(p["id"].as_u64().expect("panel id")),
            "duplicate id in {title}"
        );
        let ty = p["type"].as_str().expect("panel type");
        assert!(PANEL_TYPES.contains(&ty), "{title}: panel type {ty}");
        let g = &p["gridPos"];
        let (x, y, w, h) = (
            g["x"].as_u64().expect("x"),
            g["y"].as_u64().expect("y"),
            g["w"].as_u64().expect("w"),
            g["h"].as_u64().expect("h"),
        );
        assert!(w > 0 && h > 0 && x + w <= 24, "{title}: gridPos {g}");
        for cx in x..x + w {
            for cy in y..y + h {
                if let Some(other) = cells.insert((cx, cy), title.clone()) {
                    panic!("panels {other:?} and {title:?} overlap at ({cx}, {cy})");
                }
            }
        }
        if ty == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}: datasource");
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no targets");
        let mut refs = BTreeSet::new();
        for t in targets {
            assert!(
                refs.insert(t["refId"].as_str().expect("refId")),
                "{title}: duplicate refId"
            );
            assert_eq!(
                t["datasource"]["uid"], "${datasource}",
                "{title}: target datasource"
            );
            let expr = t["expr"].as_str().expect("expr");
            // Every $variable is defined.
            for var in expr.split('$').skip(1) {
                let name: String = var
                    .trim_start_matches('{')
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                assert!(defined.contains(&name), "{title}: undefined variable ${name}");
            }
            let expr = substitute_grafana(expr);
            let names = check_against_agent(&expr, &exported, &["up"])
                .unwrap_or_else(|e| panic!("{title}: {expr}: {e}"));
            used_metrics.extend(names.metrics);
            exprs.push((title.clone(), expr));
        }
    }

    // What the dashboard is for: per-rule traffic and denies, realization latency, flow counts,
    // flow-op errors, actor restarts, controller connection, interfaces.
    let all: String = exprs
        .iter()
        .map(|(_, e)| e.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    for needed in [
        "antrea_vm_agent_rule_packets_total",
        "antrea_vm_agent_rule_bytes_total",
        "antrea_vm_agent_realization_latency_seconds_bucket",
        "antrea_agent_ovs_flow_count",
        "antrea_agent_ovs_flow_ops_error_count",
        "antrea_vm_agent_actor_restarts_total",
        "antrea_vm_agent_controller_connected",
        "antrea_vm_agent_interfaces_attached",
    ] {
        assert!(
            used_metrics.contains(needed),
            "the dashboard does not show {needed}"
        );
    }
    assert!(all.contains(r#"action=~"Drop|Reject""#), "no deny panel");

    // promtool, when present, parses every expression as recording rules.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rules = String::from("groups:\n- name: dashboard\n  rules:\n");
    for (n, (_, expr)) in exprs.iter().enumerate() {
        rules.push_str(&format!(
            "  - record: dashboard:expr{n}\n    expr: {}\n",
            serde_json::to_string(expr).expect("quote")
        ));
    }
    let file = dir.path().join("dashboard-rules.yml");
    std::fs::write(&file, rules).expect("write");
    run_promtool(&["check".as_ref(), "rules".as_ref(), file.as_os_str()]);
}

// ---------------------------------------------------------------------------------------------
// Alerts and scrape configuration.

fn yaml(rel: &str) -> Yaml {
    serde_norway::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn s<'a>(v: &'a Yaml, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Yaml::as_str)
}

#[test]
fn alert_rules_are_well_formed_and_cover_the_agent_failures() {
    let exported = exported();
    let doc = yaml("metrics/prometheus-alerts.yml");
    let groups = doc.get("groups").and_then(Yaml::as_sequence).expect("groups");
    assert!(!groups.is_empty());
    let mut alerts = BTreeMap::new();
    for g in groups {
        assert!(s(g, "name").is_some_and(|n| !n.is_empty()), "group name");
        for r in g.get("rules").and_then(Yaml::as_sequence).expect("rules") {
            let name = s(r, "alert").expect("every rule is an alert").to_string();
            assert!(
                name.starts_with(char::is_uppercase) && name.chars().all(char::is_alphanumeric),
                "{name}: CamelCase"
            );
            let expr = s(r, "expr").expect("expr").trim().to_string();
            check_against_agent(&expr, &exported, &["up"]).unwrap_or_else(|e| panic!("{name}: {expr}: {e}"));
            let f = s(r, "for").expect("for");
            assert!(is_duration(f), "{name}: for {f}");
            let labels = r.get("labels").expect("labels");
            assert!(
                matches!(s(labels, "severity"), Some("critical" | "warning" | "info")),
                "{name}: severity"
            );
            let ann = r.get("annotations").expect("annotations");
            for key in ["summary", "description"] {
                assert!(
                    s(ann, key).is_some_and(|t| t.len() > 10),
                    "{name}: annotation {key}"
                );
            }
            assert!(
                alerts.insert(name.clone(), (expr, f.to_string())).is_none(),
                "duplicate {name}"
            );
        }
    }
    let find = |needle: &str| {
        alerts
            .iter()
            .find(|(_, (e, _))| e.contains(needle))
            .unwrap_or_else(|| panic!("no alert on {needle}"))
    };
    let (_, (e, _)) = find("up{");
    assert!(e.ends_with("== 0"), "agent down: {e}");
    let (_, (e, f)) = find("antrea_vm_agent_controller_connected");
    assert!(
        e.ends_with("== 0") && f == "5m",
        "controller disconnected for 5 minutes: {e} for {f}"
    );
    find("antrea_agent_ovs_flow_ops_error_count");
    find("antrea_vm_agent_actor_restarts_total");
    find("antrea_vm_agent_rules_not_enforced");
    // The job selectors match the scrape jobs.
    let scrape = yaml("metrics/prometheus-scrape.yml");
    for job in scrape
        .get("scrape_configs")
        .and_then(Yaml::as_sequence)
        .expect("scrape_configs")
    {
        let name = s(job, "job_name").expect("job_name");
        assert!(
            name.starts_with("antrea-vm-agent"),
            "job {name} is not selected by the alerts"
        );
    }
    for (name, (e, _)) in &alerts {
        assert!(
            e.contains(r#"job=~"antrea-vm-agent.*""#),
            "{name} does not select the agent's jobs"
        );
    }
    run_promtool(&[
        "check".as_ref(),
        "rules".as_ref(),
        repo().join("metrics/prometheus-alerts.yml").as_os_str(),
    ]);
}

#[test]
fn scrape_config_targets_the_agent_listener_plain_and_with_tls_and_token() {
    let doc = yaml("metrics/prometheus-scrape.yml");
    let jobs = doc
        .get("scrape_configs")
        .and_then(Yaml::as_sequence)
        .expect("scrape_configs");
    let mut names = BTreeSet::new();
    let default_addr = antrea_vm_agent::config::DEFAULT_METRICS_BIND_ADDRESS;
    let port = default_addr.rsplit(':').next().expect("port");
    let (mut plain, mut secure) = (false, false);
    for job in jobs {
        let name = s(job, "job_name").expect("job_name");
        assert!(names.insert(name), "duplicate job {name}");
        assert_eq!(s(job, "metrics_path"), Some("/metrics"), "{name}");
        let targets: Vec<&str> = job
            .get("static_configs")
            .and_then(Yaml::as_sequence)
            .into_iter()
            .flatten()
            .flat_map(|c| c.get("targets").and_then(Yaml::as_sequence).into_iter().flatten())
            .filter_map(Yaml::as_str)
            .collect();
        let has_sd = job.get("file_sd_configs").is_some();
        assert!(!targets.is_empty() || has_sd, "{name}: no targets");
        match s(job, "scheme") {
            Some("http") => {
                assert!(
                    targets.contains(&default_addr),
                    "{name}: the agent's default {default_addr}"
                );
                plain = true;
            }
            Some("https") => {
                let tls = job.get("tls_config").expect("tls_config");
                assert!(s(tls, "ca_file").is_some(), "{name}: ca_file");
                let auth = job.get("authorization").expect("authorization");
                assert_eq!(s(auth, "type"), Some("Bearer"));
                assert!(s(auth, "credentials_file").is_some(), "{name}: token file");
                secure = true;
            }
            other => panic!("{name}: scheme {other:?}"),
        }
        for t in &targets {
            assert!(
                t.ends_with(&format!(":{port}")),
                "{name}: target {t} is not the agent's port {port}"
            );
        }
    }
    assert!(plain && secure, "a plain local job and a TLS + bearer token job");
    // The operations guide documents the same config keys the agent reads, by their full path.
    let guide = read("docs/operations.md");
    for key in ["bindAddress", "tlsCertFile", "tlsKeyFile", "bearerTokenFile"] {
        assert!(
            guide.contains(&format!("`metricsServer.{key}`")),
            "docs/operations.md does not explain metricsServer.{key}"
        );
    }
    run_promtool(&[
        "check".as_ref(),
        "config".as_ref(),
        "--syntax-only".as_ref(),
        repo().join("metrics/prometheus-scrape.yml").as_os_str(),
    ]);
}

#[test]
fn unit_and_container_agree_with_the_agent_layout() {
    let unit = read("deploy/systemd/antrea-vm-agent.service");
    assert!(unit.contains(&format!("--log_file={AGENT_LOG}")));
    let containerfile = read("deploy/Containerfile");
    for needed in [
        "/var/run/openvswitch",
        "/var/run/netns",
        "--network host",
        "antrea-vm-agent",
    ] {
        assert!(containerfile.contains(needed), "Containerfile lacks {needed}");
    }
}

// ---------------------------------------------------------------------------------------------
// The agent's log has one owner for its rotation: the agent (`--log_file_max_size`,
// `--log_file_max_num`), as klog is for the Go agent. The real logrotate, given every
// /etc/logrotate.d file the package or the installer ships, must leave the log and the agent's
// backups alone.

const AGENT_LOG: &str = "/var/log/antrea/antrea-agent.log";

/// The stanza that packages up to 0.1.0-1 installed as /etc/logrotate.d/antrea-vm-agent: a second
/// owner, kept here as the control that shows the harness catches one.
const RETIRED_STANZA: &str = "/var/log/antrea/antrea-agent.log {
    daily
    maxsize 100M
    rotate 7
    missingok
    notifempty
    compress
    delaycompress
    copytruncate
}
";

/// The real logrotate (Debian package `logrotate`): on PATH, or in sbin, which a user's PATH may
/// lack.
fn logrotate() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join("logrotate"))
        .find(|p| p.is_file())
        .expect("logrotate is needed (Debian package logrotate; make deps installs it)")
}

/// Every /etc/logrotate.d file the product ships, as (who ships it and where, its content): the
/// Debian package's (its asset list, read through `cargo metadata`) and deploy/install-vm.sh's
/// (run into a scratch root).
fn shipped_logrotate_files() -> Vec<(String, String)> {
    let mut shipped = Vec::new();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(&cargo)
        .args(["metadata", "--no-deps", "--format-version", "1", "--frozen"])
        .current_dir(repo())
        .output()
        .expect("cargo metadata");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: Json = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let package = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .find(|p| p["name"] == "antrea-vm-agent")
        .expect("the agent's package");
    let assets = package["metadata"]["deb"]["assets"]
        .as_array()
        .expect("[package.metadata.deb] assets");
    assert!(assets.len() > 5, "{assets:?}");
    let mut destinations = Vec::new();
    for asset in assets {
        let (src, dest) = (asset[0].as_str().expect("src"), asset[1].as_str().expect("dest"));
        let mut dest = dest.trim_start_matches('/').to_string();
        if dest.ends_with('/') {
            dest.push_str(&Path::new(src).file_name().expect("a file").to_string_lossy());
        }
        if dest.starts_with("etc/logrotate.d/") {
            shipped.push((format!("the package's /{dest}"), read(src)));
        }
        destinations.push(dest);
    }
    // The destinations are read as cargo-deb reads them (a directory takes the file's name).
    assert!(
        destinations
            .iter()
            .any(|d| d == "usr/lib/NetworkManager/conf.d/90-antrea-vm-agent.conf"),
        "{destinations:?}"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    std::fs::create_dir(&root).expect("root");
    let conf = dir.path().join("antrea-agent.conf");
    std::fs::write(
        &conf,
        "nodeType: externalNode\nfeatureGates:\n  ExternalNode: true\nstandalone:\n  \
         externalNodeFile: /etc/antrea/external-node.yaml\n",
    )
    .expect("config");
    let out = Command::new("bash")
        .arg(repo().join("deploy/install-vm.sh"))
        .arg("--root")
        .arg(&root)
        .arg("--config")
        .arg(&conf)
        .args(["--bin", env!("CARGO_BIN_EXE_antrea-vm-agent")])
        .args(["--nodename", "vm1", "--no-systemd"])
        .env("TMPDIR", dir.path())
        .output()
        .expect("install-vm.sh");
    assert!(
        out.status.success(),
        "install-vm.sh: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        root.join("usr/sbin/antrea-vm-agent").is_file(),
        "the installer installed"
    );
    if let Ok(entries) = std::fs::read_dir(root.join("etc/logrotate.d")) {
        for e in entries {
            let path = e.expect("entry").path();
            let text = std::fs::read_to_string(&path).expect("read");
            shipped.push((
                format!(
                    "install-vm.sh's /etc/logrotate.d/{}",
                    path.file_name().expect("name").to_string_lossy()
                ),
                text,
            ));
        }
    }
    shipped
}

/// The real logrotate, forced (every time-based rule due), with Debian's /etc/logrotate.conf
/// defaults and `files` as the content of /etc/logrotate.d, their /var/log/antrea standing for
/// `log_dir`. Returns its verbose output.
fn run_logrotate(scratch: &Path, log_dir: &Path, files: &[(String, String)]) -> String {
    let conf_d = scratch.join("logrotate.d");
    std::fs::create_dir_all(&conf_d).expect("logrotate.d");
    for (i, (_, text)) in files.iter().enumerate() {
        let text = text.replace("/var/log/antrea", &log_dir.display().to_string());
        std::fs::write(conf_d.join(format!("shipped-{i}")), text).expect("write");
    }
    let conf = scratch.join("logrotate.conf");
    std::fs::write(
        &conf,
        format!("weekly\nrotate 4\ncreate\ninclude {}\n", conf_d.display()),
    )
    .expect("logrotate.conf");
    let out = Command::new(logrotate())
        .args(["--force", "--verbose", "--state"])
        .arg(scratch.join("logrotate.state"))
        .arg(&conf)
        .output()
        .expect("run logrotate");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "logrotate failed:\n{text}");
    text
}

/// Every file of `dir` with its content (gzip files as they are).
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| {
            let path = e.expect("entry").path();
            let name = path.file_name().expect("name").to_string_lossy().into_owned();
            (name, std::fs::read(&path).expect("read"))
        })
        .collect()
}

/// A log directory where the agent's own rotation has run: `antrea-agent.log` and its three
/// backups, each two 30-byte lines, written through the agent's [`RotatingFile`] (64-byte files,
/// 3 kept).
fn agent_rotated_log(scratch: &Path) -> (PathBuf, RotatingFile) {
    use std::io::Write;
    let log_dir = scratch.join("var/log/antrea");
    let mut agent = RotatingFile::open(&log_dir.join("antrea-agent.log"), 64, 3).expect("open the log");
    for i in 1..=8 {
        agent
            .write_all(format!("I1207 agent log line {i:03}.....\n").as_bytes())
            .expect("write");
    }
    agent.flush().expect("flush");
    let files: Vec<String> = snapshot(&log_dir).into_keys().collect();
    assert_eq!(
        files,
        [
            "antrea-agent.log",
            "antrea-agent.log.1",
            "antrea-agent.log.2",
            "antrea-agent.log.3"
        ]
    );
    (log_dir, agent)
}

#[test]
fn only_the_agent_rotates_its_log_the_shipped_logrotate_files_leave_it_alone() {
    use std::io::Write;
    let shipped = shipped_logrotate_files();
    let scratch = tempfile::tempdir().expect("tempdir");
    let (log_dir, mut agent) = agent_rotated_log(scratch.path());
    let before = snapshot(&log_dir);

    let out = run_logrotate(scratch.path(), &log_dir, &shipped);
    let shipped_names: Vec<&String> = shipped.iter().map(|(who, _)| who).collect();
    assert_eq!(
        snapshot(&log_dir),
        before,
        "logrotate, with the shipped {shipped_names:?}, touched the agent's log or its backups:\n{out}"
    );

    // The agent's rotation goes on as before: the next line past the limit shifts its files.
    agent
        .write_all(b"I1207 agent log line 009.....\n")
        .expect("write");
    agent.flush().expect("flush");
    let after = snapshot(&log_dir);
    let file = |m: &BTreeMap<String, Vec<u8>>, name: &str| m.get(name).cloned().unwrap_or_default();
    assert_eq!(
        file(&after, "antrea-agent.log"),
        b"I1207 agent log line 009.....\n"
    );
    for (new, old) in [("1", ""), ("2", ".1"), ("3", ".2")] {
        assert_eq!(
            file(&after, &format!("antrea-agent.log.{new}")),
            file(&before, &format!("antrea-agent.log{old}")),
            "antrea-agent.log.{new}"
        );
    }
    assert_eq!(after.len(), 4, "{:?}", after.keys());
}

#[test]
fn the_logrotate_harness_catches_a_second_owner() {
    // The stanza earlier packages shipped, run the same way: logrotate copies the live log over
    // the agent's antrea-agent.log.1 (the agent's own .1 goes to .2.gz) and truncates the log:
    // the collision of two owners that the test above rules out.
    let scratch = tempfile::tempdir().expect("tempdir");
    let (log_dir, _agent) = agent_rotated_log(scratch.path());
    let before = snapshot(&log_dir);
    let out = run_logrotate(
        scratch.path(),
        &log_dir,
        &[("the retired stanza".to_string(), RETIRED_STANZA.to_string())],
    );
    let after = snapshot(&log_dir);
    assert_ne!(after, before, "{out}");
    assert_eq!(
        after.get("antrea-agent.log.1"),
        before.get("antrea-agent.log"),
        "logrotate's copy replaced the agent's .1:\n{out}"
    );
    assert_eq!(
        after.get("antrea-agent.log").map(Vec::len),
        Some(0),
        "copytruncate: {out}"
    );
    assert!(after.contains_key("antrea-agent.log.2.gz"), "{:?}", after.keys());
}
