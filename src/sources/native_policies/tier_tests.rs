//! Issue 41's table tests for Tiers in standalone mode, each citing the antrea-controller
//! function it matches: the first Tier created keeps a shared priority
//! (`tierValidator.createValidate`), and a policy whose Tier is missing or refused keeps its
//! Drop and Reject rules, translated fail-closed (`tierValidator.deleteValidate`, the 20-tier
//! cap, the Tier CRD schema). The other corners are in `corner_tests.rs`.

use serde_json::{json, Value};

use super::corner_tests::*;
use crate::policy::native::controller::{generated_rule_name, FAIL_CLOSED_TIER_PRIORITY};
use crate::policy::native::types::Rule;
use crate::policy::native::*;

/// A user Tier at `priority`, optionally with a creationTimestamp, and an ACNP in it.
fn tier_and_policy(tier: &str, priority: i32, created: Option<&str>) -> Vec<NativeObject> {
    let mut meta = json!({"name": tier});
    if let Some(at) = created {
        meta["creationTimestamp"] = json!(at);
    }
    vec![
        decode(
            json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "Tier", "metadata": meta,
                      "spec": {"priority": priority}}),
        )
        .expect("tier"),
        decode(
            json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
                      "metadata": {"name": format!("in-{tier}"), "uid": format!("in-{tier}")},
                      "spec": {"tier": tier, "priority": 1,
                               "appliedTo": [{"externalEntitySelector": {"matchLabels": {"role": "db"}}}],
                               "ingress": [{"action": "Drop"}]}}),
        )
        .expect("policy"),
    ]
}

/// `tierValidator.createValidate` ("priority overlaps with existing Tier"): a cluster refuses
/// the second Tier created at a priority, so the first one stays and its policies are
/// enforced. Standalone mode's "created first" (`first_created`): the earliest
/// creationTimestamp when both have one, otherwise the file first in path order, then the
/// name. The refused Tier does not exist here, but its policy is not refused: the cluster may
/// have kept that Tier (files have no creation order), and refusing would lift its Drop. It
/// keeps its Drop, ahead of every Tier. Checked through `translate_files`, the agent's own
/// loading, which `translate` and `compile` share.
#[test]
fn the_first_tier_created_is_kept_as_tier_validator_create_validate() {
    use crate::sources::native_policies::translate_files;
    use std::path::PathBuf;
    // (case, files: (path, tier, creationTimestamp), kept tier)
    type File = (&'static str, &'static str, Option<&'static str>);
    let cases: [(&str, [File; 2], &str); 5] = [
        (
            "no timestamps: file order",
            [("/d/b.yaml", "alpha", None), ("/d/a.yaml", "beta", None)],
            "beta",
        ),
        (
            "both timestamps: the earliest, whatever the files",
            [
                ("/d/a.yaml", "alpha", Some("2024-05-01T10:00:00Z")),
                ("/d/b.yaml", "beta", Some("2024-04-01T10:00:00Z")),
            ],
            "beta",
        ),
        (
            "timestamps with offsets compare as instants",
            [
                ("/d/a.yaml", "alpha", Some("2024-05-01T10:00:00+02:00")),
                ("/d/b.yaml", "beta", Some("2024-05-01T09:00:00Z")),
            ],
            "alpha",
        ),
        (
            "one timestamp only: file order",
            [
                ("/d/a.yaml", "alpha", None),
                ("/d/b.yaml", "beta", Some("2020-01-01T00:00:00Z")),
            ],
            "alpha",
        ),
        (
            "one file: the name",
            [("/d/a.yaml", "beta", None), ("/d/a.yaml", "alpha", None)],
            "alpha",
        ),
    ];
    for (case, files, kept) in cases {
        let mut by_path: std::collections::BTreeMap<PathBuf, Vec<NativeObject>> = Default::default();
        for (path, tier, created) in files {
            by_path
                .entry(PathBuf::from(path))
                .or_default()
                .extend(tier_and_policy(tier, 120, created));
        }
        let (t, errors, warnings) = translate_files(by_path.into_iter().collect(), &local());
        let refused = if kept == "alpha" { "beta" } else { "alpha" };
        let enforced: Vec<(&str, Option<i32>)> = t
            .network_policies
            .iter()
            .map(|p| (p.metadata.name.as_str(), p.tier_priority))
            .collect();
        let mut want = [
            (format!("in-{kept}"), Some(120)),
            (format!("in-{refused}"), Some(FAIL_CLOSED_TIER_PRIORITY)),
        ];
        want.sort();
        let want: Vec<(&str, Option<i32>)> = want.iter().map(|(n, p)| (n.as_str(), *p)).collect();
        assert_eq!(enforced, want, "{case}");
        assert!(
            t.network_policies
                .iter()
                .all(|p| p.rules.len() == 1 && p.rules[0].action.as_deref() == Some("Drop")),
            "{case}: both Drops stand"
        );
        let file_of = |tier: &str| {
            files
                .iter()
                .find(|(_, t, _)| *t == tier)
                .map(|(p, _, _)| *p)
                .unwrap_or_default()
        };
        assert_eq!(
            errors,
            [
                format!(
                    "policy file {}: Tier {refused}: spec.priority: tier {refused} priority 120 \
                     overlaps with existing Tier {kept} (policy file {}), which was created first \
                     and is kept; Tier {refused} is refused and {FAIL_CLOSED}",
                    file_of(refused),
                    file_of(kept)
                ),
                format!(
                    "policy file {}: ClusterNetworkPolicy in-{refused}: spec.ingress[0] (rule \
                     \"{rule}\"): {DROPS_AHEAD}, because spec.tier: tier {refused} does not exist \
                     (Tier {refused} is refused: its priority 120 is Tier {kept}'s, created first)",
                    file_of(refused),
                    rule = drop_rule_name(),
                ),
            ],
            "{case}"
        );
        assert!(warnings.is_empty(), "{case}: {warnings:?}");
    }
}

/// How a refused Tier's error says what becomes of its policies.
const FAIL_CLOSED: &str = "the policies in it are enforced fail-closed (their Drop and Reject rules \
                           ahead of every Tier, their Allow rules not enforced, their Pass rules as Drops)";

/// The verdict of a Drop rule of a policy whose Tier does not exist.
const DROPS_AHEAD: &str = "enforced fail-closed: the rule drops what it matches ahead of every Tier \
                           (tier priority -1), where no rule of another policy precedes it";

/// The name the mutating webhook gives the unnamed `{action: Drop}` ingress rule.
fn drop_rule_name() -> String {
    let rule: Rule = serde_json::from_value(json!({"action": "Drop"})).expect("rule");
    generated_rule_name("ingress", &rule)
}

/// A policy in `tier` with a Drop, an Allow and a Pass rule (ingress) and a Reject (egress).
fn policy_in_tier(tier: &str) -> Value {
    let mut p = policy(
        true,
        json!([{"action": "Drop", "name": "deny", "from": [{"ipBlock": {"cidr": "10.9.0.0/16"}}]},
               {"action": "Allow", "name": "allow", "from": [{"ipBlock": {"cidr": "10.8.0.0/16"}}]},
               {"action": "Pass", "name": "pass", "from": [{"ipBlock": {"cidr": "10.7.0.0/16"}}],
                "ports": [{"protocol": "TCP", "port": 22}]}]),
        json!([{"action": "Reject", "name": "reject", "to": [{"ipBlock": {"cidr": "10.6.0.0/16"}}]}]),
    );
    p["spec"]["tier"] = json!(tier);
    p
}

fn tier_object(name: &str, priority: i32) -> Value {
    json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "Tier", "metadata": {"name": name},
           "spec": {"priority": priority}})
}

/// `tierValidator.deleteValidate` refuses to delete a Tier that policies still name, so a
/// cluster keeps enforcing them; a policy whose Tier's file is gone (or that names a Tier that
/// never was: files have no history to tell them apart) is not refused, which would lift its
/// Drop. Fail-closed, ahead of every Tier: its Drop and Reject stand as written, its Allow
/// allows nothing (its peer matches nothing), its Pass is a Drop of what it matched (its ports
/// kept). Each rule is reported, by a line and a `missing_tier` RuleNote.
#[test]
fn a_deleted_tiers_policy_keeps_its_drops_as_tier_validator_delete_validate() {
    let object = decode(policy_in_tier("gone")).expect("decodes");
    let t = translate(&Inputs {
        objects: vec![("test.yaml".into(), object.clone())],
        local_entities: local(),
    });
    assert_eq!(t.network_policies.len(), 1, "{:#?}", t.errors);
    let p = &t.network_policies[0];
    assert_eq!(p.tier_priority, Some(FAIL_CLOSED_TIER_PRIORITY));
    assert_eq!(
        p.priority,
        Some(5.0),
        "the policy priority orders it among such policies"
    );
    let rules: Vec<Value> = p
        .rules
        .iter()
        .map(|r| serde_json::to_value(r).expect("encodes"))
        .collect();
    let cidr =
        |c: &str| json!({"ipBlocks": [{"cidr": {"ip": format!("AAAAAAAAAAAAAP//{c}"), "prefixLength": 16}}]});
    // (name, action, peer side, peer): the Drop and Reject as written, the Allow matching
    // nothing, the Pass a Drop of its own match.
    let want = [
        ("deny", "Drop", "from", cidr("CgkAAA==")),
        ("allow", "Allow", "from", json!({})),
        ("pass", "Drop", "from", cidr("CgcAAA==")),
        ("reject", "Reject", "to", cidr("CgYAAA==")),
    ];
    for (i, (name, action, side, peer)) in want.iter().enumerate() {
        assert_eq!(rules[i]["name"], *name);
        assert_eq!(rules[i]["action"], *action, "{name}");
        assert_eq!(rules[i][*side], *peer, "{name}");
    }
    assert!(rules[2].get("services").is_some(), "the Pass keeps its ports");
    let why = "because spec.tier: tier gone does not exist";
    let prefix = "test.yaml: ClusterNetworkPolicy p:";
    assert_eq!(
        t.errors,
        [
            format!("{prefix} spec.ingress[0] (rule \"deny\"): {DROPS_AHEAD}, {why}"),
            format!(
                "{prefix} spec.ingress[1] (rule \"allow\"): not enforced: the rule allows nothing \
                 (dropping an Allow rule never opens traffic), {why}"
            ),
            format!(
                "{prefix} spec.ingress[2] (rule \"pass\"): enforced fail-closed: the Pass rule is \
                 installed as a Drop of what it matches, ahead of every Tier (tier priority -1; a Pass \
                 could let a lower rule allow what the Baseline tier drops), {why}"
            ),
            format!(
                "{prefix} spec.egress[0] (rule \"reject\"): enforced fail-closed: the rule rejects what \
                 it matches ahead of every Tier (tier priority -1), where no rule of another policy \
                 precedes it, {why}"
            ),
        ]
    );
    // The same, as RuleNotes for the policy's status and `get networkpolicy`.
    let state = NativeState::new(vec![("test.yaml".into(), object)], local());
    let all_notes = state.rule_notes();
    assert_eq!(all_notes.len(), 1, "{all_notes:?}");
    let rule_notes = all_notes.values().next().expect("the policy's notes");
    let notes: Vec<(usize, crate::policy::refuse::Reason)> =
        rule_notes.iter().map(|n| (n.rule_index, n.reason)).collect();
    let missing = crate::policy::refuse::Reason::MissingTier;
    assert_eq!(notes, [(0, missing), (1, missing), (2, missing), (3, missing)]);
    assert!(rule_notes[0].message.ends_with(why), "{:?}", rule_notes[0]);
}

/// Once compiled, a policy of a missing Tier drops ahead of every Tier: its Drop has a higher
/// OpenFlow priority than the Allow of a Tier at priority 0 (the highest a Tier can have), and
/// its Allow installs no flow that allows.
#[test]
fn allow_rules_of_a_policy_in_a_missing_tier_are_not_enforced() {
    let mut gone = policy(
        true,
        json!([{"action": "Drop", "name": "deny", "from": [{"ipBlock": {"cidr": "10.9.0.0/16"}}]},
               {"action": "Allow", "name": "allow", "from": [{"ipBlock": {"cidr": "10.8.0.0/16"}}]}]),
        json!([]),
    );
    gone["spec"]["tier"] = json!("gone");
    let mut top = policy(
        true,
        json!([{"action": "Allow", "name": "top-allow", "from": [{"ipBlock": {"cidr": "10.9.0.0/16"}}]}]),
        json!([]),
    );
    top["metadata"] = json!({"name": "top", "uid": "uid-top"});
    top["spec"]["tier"] = json!("top");
    top["spec"]["priority"] = json!(1);
    let t = translate(&Inputs {
        objects: [tier_object("top", 0), top, gone]
            .into_iter()
            .map(|o| ("test.yaml".to_string(), decode(o).expect("decodes")))
            .collect(),
        local_entities: local(),
    });
    assert_eq!(t.network_policies.len(), 2, "{:#?}", t.errors);
    let state = "interfaces:\n- {name: eth0, ofport: 3, uplinkOfport: 2, ips: [10.99.0.2], \
                 externalEntity: {namespace: vm-ns, name: vm1-3e616}}\n";
    let out = crate::cli::compile::compile_state_with(state, t.objects()).expect("compiles");
    let of_priority = |flow: &str| -> u32 {
        flow.split(',')
            .find_map(|f| f.trim().strip_prefix("priority="))
            .and_then(|p| p.parse().ok())
            .expect("a priority")
    };
    // The source clause of each rule: 10.9.0.0/16 for both the Drop and the Tier-0 Allow.
    let source_flows: Vec<&String> = out
        .flows
        .iter()
        .filter(|f| f.contains("table=AntreaPolicyIngressRule") && f.contains("nw_src=10.9.0.0/16"))
        .collect();
    assert_eq!(source_flows.len(), 2, "{:#?}", out.flows);
    let mut priorities: Vec<u32> = source_flows.iter().map(|f| of_priority(f)).collect();
    priorities.dedup();
    assert_eq!(priorities.len(), 2, "distinct priorities: {source_flows:#?}");
    // The Allow of the missing Tier's policy (10.8.0.0/16) has no flow.
    assert!(
        !out.flows.iter().any(|f| f.contains("nw_src=10.8.0.0/16")),
        "{:#?}",
        out.flows
    );
    // The Drop's action flow (it marks the packet for the drop in IngressMetric) is above the
    // Tier-0 Allow's (which commits the connection).
    let action_flow = |mark: &str| {
        out.flows
            .iter()
            .filter(|f| {
                f.contains("table=AntreaPolicyIngressRule") && f.contains("conj_id=") && f.contains(mark)
            })
            .map(|f| of_priority(f))
            .collect::<Vec<u32>>()
    };
    let drops = action_flow("set_field:0x400/0x400->reg0");
    let allows = action_flow("ct(commit");
    assert_eq!(drops.len(), 1, "{:#?}", out.flows);
    assert!(
        allows.iter().all(|a| drops[0] > *a),
        "the Drop precedes every Allow: {:#?}",
        out.flows
    );
    assert_eq!(drops[0], priorities.iter().copied().max().unwrap_or_default());
}

/// `tierValidator.createValidate` refuses a Tier when 20 exist ("maximum number of Tiers
/// supported: 20"), so in a cluster the Tiers that exist keep their policies. Files have no
/// creation order: the agent counts the Tiers in priority order, and the one past the cap is
/// refused here though a cluster may hold it. Its policy keeps its Drop, ahead of every Tier.
#[test]
fn a_tier_past_the_cap_keeps_its_drops_as_tier_validator_create_validate() {
    // The six default tiers and 14 user Tiers make 20; the 15th (priority 15) is past the cap.
    let mut objects: Vec<Value> = (1..=15).map(|i| tier_object(&format!("t{i:02}"), i)).collect();
    objects.push(policy_in_tier("t15"));
    let t = translate(&Inputs {
        objects: objects
            .into_iter()
            .map(|o| ("test.yaml".to_string(), decode(o).expect("decodes")))
            .collect(),
        local_entities: local(),
    });
    assert_eq!(t.network_policies.len(), 1, "{:#?}", t.errors);
    let p = &t.network_policies[0];
    assert_eq!(p.tier_priority, Some(FAIL_CLOSED_TIER_PRIORITY));
    let actions: Vec<Option<&str>> = p.rules.iter().map(|r| r.action.as_deref()).collect();
    assert_eq!(
        actions,
        [Some("Drop"), Some("Allow"), Some("Drop"), Some("Reject")]
    );
    assert_eq!(t.errors.len(), 5, "{:#?}", t.errors);
    assert_eq!(
        t.errors[0],
        format!("test.yaml: Tier t15: maximum number of Tiers supported: 20; {FAIL_CLOSED}")
    );
    assert!(
        t.errors[1].ends_with(
            "because spec.tier: tier t15 does not exist (Tier t15 is refused: 20 Tiers of higher \
             precedence exist (maximum number of Tiers supported: 20))"
        ),
        "{}",
        t.errors[1]
    );
}

/// The Tier CRD's schema requires `priority` inside `spec` but not `spec` itself: a cluster
/// creates a Tier without `spec` at priority 0 (the Go type's zero value, which
/// `tierValidator.createValidate` accepts), and the agent does too. A `spec` without
/// `priority` is still refused, as the schema refuses it.
#[test]
fn a_tier_without_spec_has_priority_0_as_the_tier_crd_schema_allows() {
    for spec in [None, Some(Value::Null)] {
        let mut tier = json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "Tier",
                              "metadata": {"name": "zero"}});
        if let Some(spec) = spec {
            tier["spec"] = spec;
        }
        let mut p = policy(true, json!([{"action": "Drop", "name": "d"}]), json!([]));
        p["spec"]["tier"] = json!("zero");
        let t = translate(&Inputs {
            objects: [tier, p]
                .into_iter()
                .map(|o| ("test.yaml".to_string(), decode(o).expect("decodes")))
                .collect(),
            local_entities: local(),
        });
        assert_eq!(t.errors, Vec::<String>::new());
        assert_eq!(t.network_policies[0].tier_priority, Some(0));
    }
    let e = decode(json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "Tier",
                          "metadata": {"name": "zero"}, "spec": {}}))
    .expect_err("refused");
    assert_eq!(e.to_string(), "Tier zero: spec.priority: Required value");
}

/// No history: a running agent taken through a tie (`tierValidator.createValidate`), the
/// deletion of a Tier its policies still name (`tierValidator.deleteValidate`, which a
/// cluster would refuse) and the cap holds what a fresh start (`translate_files`) and a
/// restarted agent make of each directory state, and never lifts the Drop of the policy in
/// the Tier that lost (`validateTierForPolicy` would refuse it when created; here it stays).
#[test]
fn the_running_agent_and_a_fresh_start_agree_on_missing_and_refused_tiers() {
    use crate::sources::native_policies::{translate_files, ChangedFile, LocalController};
    use crate::sources::policy_dir::PolicySnapshot;
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    let obj = |v: Value| decode(v).expect("decodes");
    let mut in_alpha = policy_in_tier("alpha");
    in_alpha["metadata"] = json!({"name": "in-alpha", "uid": "in-alpha"});
    let mut in_beta = policy(true, json!([{"action": "Allow", "name": "a"}]), json!([]));
    in_beta["metadata"] = json!({"name": "in-beta", "uid": "in-beta"});
    in_beta["spec"]["tier"] = json!("beta");
    let many: Vec<NativeObject> = (1..=14)
        .map(|i| obj(tier_object(&format!("t{i:02}"), i)))
        .collect();
    // (step, file, its objects: None removes it, the tier priority of in-alpha)
    type Step = (&'static str, &'static str, Option<Vec<NativeObject>>, i32);
    let steps: Vec<Step> = vec![
        (
            "alpha alone",
            "/p/b.yaml",
            Some(vec![obj(tier_object("alpha", 120)), obj(in_alpha.clone())]),
            120,
        ),
        (
            "beta at 120 in a file before: alpha loses",
            "/p/a.yaml",
            Some(vec![obj(tier_object("beta", 120)), obj(in_beta)]),
            FAIL_CLOSED_TIER_PRIORITY,
        ),
        ("beta goes: alpha is back", "/p/a.yaml", None, 120),
        (
            "14 Tiers of higher precedence: alpha is past the cap",
            "/p/c.yaml",
            Some(many),
            FAIL_CLOSED_TIER_PRIORITY,
        ),
        ("they go", "/p/c.yaml", None, 120),
        (
            "alpha's Tier is deleted, its policy stays",
            "/p/b.yaml",
            Some(vec![obj(in_alpha)]),
            FAIL_CLOSED_TIER_PRIORITY,
        ),
    ];
    let mut files: BTreeMap<PathBuf, Vec<NativeObject>> = BTreeMap::new();
    let mut running = LocalController::default();
    let pass = |controller: &mut LocalController,
                files: &BTreeMap<PathBuf, Vec<NativeObject>>,
                changed: &[ChangedFile]| {
        let shared: BTreeMap<&Path, Vec<std::sync::Arc<NativeObject>>> = files
            .iter()
            .map(|(path, objects)| {
                (
                    path.as_path(),
                    objects.iter().cloned().map(std::sync::Arc::new).collect(),
                )
            })
            .collect();
        let current = |path: &Path| shared.get(path).map_or(&[][..], Vec::as_slice);
        let mut snapshot = PolicySnapshot::default();
        let mut errors = Vec::new();
        controller.translate_into(changed, &current, &local(), &mut snapshot, &mut errors);
        errors.sort();
        snapshot.errors = errors;
        snapshot
    };
    for (step, path, objects, alpha_tier) in steps {
        let path = PathBuf::from(path);
        let before = match objects {
            Some(o) => files.insert(path.clone(), o),
            None => files.remove(&path),
        };
        let changed = ChangedFile {
            path,
            before: before.unwrap_or_default().iter().map(native_key).collect(),
        };
        let now = pass(&mut running, &files, &[changed]);
        // A restarted agent: every file, to a new controller.
        let all: Vec<ChangedFile> = files
            .keys()
            .map(|p| ChangedFile {
                path: p.clone(),
                before: Vec::new(),
            })
            .collect();
        let restarted = pass(&mut LocalController::default(), &files, &all);
        assert_eq!(now, restarted, "{step}");
        // `translate`: the same objects and lines (the rule notes are lines there).
        let (t, errors, warnings) = translate_files(
            files.iter().map(|(p, o)| (p.clone(), o.clone())).collect(),
            &local(),
        );
        let mut lines = [errors, warnings].concat();
        lines.sort();
        assert_eq!(now.errors, lines, "{step}");
        let summary = |name: &str, tier: Option<i32>, actions: Vec<String>| (name.to_string(), tier, actions);
        let from_translate: Vec<_> = t
            .network_policies
            .iter()
            .map(|p| {
                summary(
                    &p.metadata.name,
                    p.tier_priority,
                    p.rules.iter().map(|r| format!("{:?}", r.action)).collect(),
                )
            })
            .collect();
        let from_agent: Vec<_> = now
            .network_policies
            .iter()
            .map(|p| {
                summary(
                    &p.name,
                    p.tier_priority,
                    p.rules
                        .iter()
                        .map(|r| format!("{:?}", Some(format!("{:?}", r.action))))
                        .collect(),
                )
            })
            .collect();
        assert_eq!(from_agent, from_translate, "{step}");
        // The Drop of in-alpha is never lifted; where its Tier is gone it carries notes.
        let alpha = now
            .network_policies
            .iter()
            .find(|p| p.name == "in-alpha")
            .unwrap_or_else(|| panic!("{step}: in-alpha is enforced"));
        assert_eq!(alpha.tier_priority, Some(alpha_tier), "{step}");
        assert_eq!(format!("{:?}", alpha.rules[0].action), "Drop", "{step}");
        assert_eq!(
            alpha.rule_notes.len(),
            if alpha_tier < 0 { 4 } else { 0 },
            "{step}"
        );
    }
}
